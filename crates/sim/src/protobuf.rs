//! Just enough of the Kubernetes protobuf encoding to accept the typed
//! creates kubectl sends as protobuf (`kubectl create namespace`,
//! `kubectl create service`). Other protobuf bodies get 415; kubectl sends
//! JSON for everything else.

use serde_json::{Map, Value, json};

/// A body that is not the protobuf this module understands.
#[derive(Debug, thiserror::Error)]
#[error("failed to decode protobuf: {0}")]
pub struct ProtobufError(&'static str);

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(b: &[u8], i: &mut usize) -> Result<u64, ProtobufError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i).ok_or(ProtobufError("truncated varint"))?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(ProtobufError("varint too long"))
}

fn fields(b: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, ProtobufError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        let (num, ty) = (key >> 3, key & 7);
        match ty {
            0 => {
                let v = varint(b, &mut i)?;
                out.push((num, Wire::Varint(v)));
            }
            2 => {
                let n = varint(b, &mut i)? as usize;
                let s = b.get(i..i + n).ok_or(ProtobufError("truncated field"))?;
                i += n;
                out.push((num, Wire::Bytes(s)));
            }
            1 => i += 8,
            5 => i += 4,
            _ => return Err(ProtobufError("unsupported wire type")),
        }
    }
    Ok(out)
}

fn string(w: &Wire<'_>) -> Result<String, ProtobufError> {
    match w {
        Wire::Bytes(b) => String::from_utf8(b.to_vec()).map_err(|_| ProtobufError("invalid utf-8")),
        Wire::Varint(_) => Err(ProtobufError("expected a string")),
    }
}

fn bytes<'a>(w: &Wire<'a>) -> Result<&'a [u8], ProtobufError> {
    match w {
        Wire::Bytes(b) => Ok(b),
        Wire::Varint(_) => Err(ProtobufError("expected bytes")),
    }
}

fn number(w: &Wire<'_>) -> Result<u64, ProtobufError> {
    match w {
        Wire::Varint(v) => Ok(*v),
        Wire::Bytes(_) => Err(ProtobufError("expected a number")),
    }
}

fn string_map(entry: &[u8], into: &mut Map<String, Value>) -> Result<(), ProtobufError> {
    let (mut k, mut v) = (String::new(), String::new());
    for (n, w) in fields(entry)? {
        match n {
            1 => k = string(&w)?,
            2 => v = string(&w)?,
            _ => {}
        }
    }
    into.insert(k, v.into());
    Ok(())
}

/// ObjectMeta: name=1, generateName=2, namespace=3, labels=11, annotations=12.
fn object_meta(b: &[u8]) -> Result<Value, ProtobufError> {
    let mut m = Map::new();
    let (mut labels, mut annotations) = (Map::new(), Map::new());
    for (n, w) in fields(b)? {
        match n {
            1..=3 => {
                let s = string(&w)?;
                if !s.is_empty() {
                    let k = ["name", "generateName", "namespace"][n as usize - 1];
                    m.insert(k.into(), s.into());
                }
            }
            11 => string_map(bytes(&w)?, &mut labels)?,
            12 => string_map(bytes(&w)?, &mut annotations)?,
            _ => {}
        }
    }
    if !labels.is_empty() {
        m.insert("labels".into(), labels.into());
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), annotations.into());
    }
    Ok(Value::Object(m))
}

/// IntOrString: type=1 (0 int, 1 string), intVal=2, strVal=3.
fn int_or_string(b: &[u8]) -> Result<Value, ProtobufError> {
    let (mut ty, mut int, mut text) = (0, 0, String::new());
    for (n, w) in fields(b)? {
        match n {
            1 => ty = number(&w)?,
            2 => int = number(&w)? as i32,
            3 => text = string(&w)?,
            _ => {}
        }
    }
    Ok(if ty == 1 { text.into() } else { int.into() })
}

/// ServicePort: name=1, protocol=2, port=3, targetPort=4, nodePort=5,
/// appProtocol=6.
fn service_port(b: &[u8]) -> Result<Value, ProtobufError> {
    let mut m = Map::new();
    for (n, w) in fields(b)? {
        let (k, v): (&str, Value) = match n {
            1 => ("name", string(&w)?.into()),
            2 => ("protocol", string(&w)?.into()),
            3 => ("port", (number(&w)? as i32).into()),
            4 => ("targetPort", int_or_string(bytes(&w)?)?),
            5 => ("nodePort", (number(&w)? as i32).into()),
            6 => ("appProtocol", string(&w)?.into()),
            _ => continue,
        };
        // Go's JSON leaves empty values out; so does this.
        if v != "" && v != 0 {
            m.insert(k.into(), v);
        }
    }
    Ok(Value::Object(m))
}

/// ServiceSpec, the fields a typed create sets: ports=1, selector=2,
/// clusterIP=3, type=4, sessionAffinity=7, externalName=10,
/// publishNotReadyAddresses=13, ipFamilyPolicy=17, clusterIPs=18,
/// ipFamilies=19.
fn service_spec(b: &[u8]) -> Result<Value, ProtobufError> {
    let mut m = Map::new();
    let (mut ports, mut selector) = (Vec::new(), Map::new());
    let (mut ips, mut families) = (Vec::new(), Vec::new());
    for (n, w) in fields(b)? {
        match n {
            1 => ports.push(service_port(bytes(&w)?)?),
            2 => string_map(bytes(&w)?, &mut selector)?,
            3 | 4 | 7 | 10 | 17 => {
                let s = string(&w)?;
                if !s.is_empty() {
                    let k = match n {
                        3 => "clusterIP",
                        4 => "type",
                        7 => "sessionAffinity",
                        10 => "externalName",
                        _ => "ipFamilyPolicy",
                    };
                    m.insert(k.into(), s.into());
                }
            }
            13 if number(&w)? != 0 => {
                m.insert("publishNotReadyAddresses".into(), true.into());
            }
            18 => ips.push(Value::from(string(&w)?)),
            19 => families.push(Value::from(string(&w)?)),
            _ => {}
        }
    }
    for (k, v) in [
        ("ports", ports),
        ("clusterIPs", ips),
        ("ipFamilies", families),
    ] {
        if !v.is_empty() {
            m.insert(k.into(), v.into());
        }
    }
    if !selector.is_empty() {
        m.insert("selector".into(), selector.into());
    }
    Ok(Value::Object(m))
}

/// Decodes a `k8s\0`-prefixed `runtime.Unknown` holding a v1 Namespace or
/// Service (metadata=1, spec=2; a create's status is ignored anyway).
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let inner = body
        .strip_prefix(b"k8s\0")
        .ok_or(ProtobufError("missing k8s magic"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, w) in fields(inner)? {
        match n {
            1 => {
                for (m, w) in fields(bytes(&w)?)? {
                    match m {
                        1 => api_version = string(&w)?,
                        2 => kind = string(&w)?,
                        _ => {}
                    }
                }
            }
            2 => raw = bytes(&w)?,
            _ => {}
        }
    }
    if kind != "Namespace" && kind != "Service" {
        return Err(ProtobufError(
            "only Namespace and Service are accepted as protobuf",
        ));
    }
    let mut obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {}});
    for (n, w) in fields(raw)? {
        match n {
            1 => obj["metadata"] = object_meta(bytes(&w)?)?,
            2 if kind == "Service" => obj["spec"] = service_spec(bytes(&w)?)?,
            _ => {}
        }
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key or a small length as a varint.
    fn var(x: u32) -> Vec<u8> {
        if x < 0x80 {
            vec![x as u8]
        } else {
            vec![(x & 0x7f) as u8 | 0x80, (x >> 7) as u8]
        }
    }

    fn field(n: u32, b: &[u8]) -> Vec<u8> {
        let mut v = [var((n << 3) | 2), var(b.len() as u32)].concat();
        v.extend_from_slice(b);
        v
    }

    #[test]
    fn decodes_a_namespace() {
        let label = [field(1, b"team"), field(2, b"a")].concat();
        let meta = [field(1, b"foo"), field(11, &label)].concat();
        let raw = field(1, &meta);
        let tm = [field(1, b"v1"), field(2, b"Namespace")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm), field(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["metadata"]["name"], "foo");
        assert_eq!(v["metadata"]["labels"]["team"], "a");
        assert_eq!(v["kind"], "Namespace");
        assert!(decode(b"k8s\0\x0a\x05").is_err());
        assert!(decode(b"nope").is_err());
    }

    fn varint_field(n: u32, v: u32) -> Vec<u8> {
        [var(n << 3), var(v)].concat()
    }

    #[test]
    fn decodes_a_service() {
        let target = [varint_field(1, 1), field(3, b"http")].concat();
        let port = [
            field(1, b"web"),
            field(2, b"TCP"),
            varint_field(3, 80),
            field(4, &target),
        ]
        .concat();
        let sel = [field(1, b"app"), field(2, b"web")].concat();
        let spec = [
            field(1, &port),
            field(2, &sel),
            field(3, b""),
            field(4, b"ClusterIP"),
            varint_field(13, 0),
            field(17, b"RequireDualStack"),
            field(19, b"IPv4"),
            field(19, b"IPv6"),
        ]
        .concat();
        let raw = [field(1, &field(1, b"web")), field(2, &spec)].concat();
        let tm = [field(1, b"v1"), field(2, b"Service")].concat();
        let body = [b"k8s\0".to_vec(), field(1, &tm), field(2, &raw)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(v["metadata"]["name"], "web");
        assert_eq!(
            v["spec"],
            json!({"ports": [{"name": "web", "protocol": "TCP", "port": 80, "targetPort": "http"}],
                   "selector": {"app": "web"}, "type": "ClusterIP",
                   "ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"]})
        );
    }
}
