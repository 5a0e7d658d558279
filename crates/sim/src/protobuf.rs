//! Just enough of the Kubernetes protobuf encoding to accept the typed
//! creates kubectl sends as protobuf (`kubectl create namespace`). Other
//! protobuf bodies get 415; kubectl sends JSON for everything else.

use serde_json::{Map, Value, json};

/// A body that is not the protobuf this module understands.
#[derive(Debug, thiserror::Error)]
#[error("failed to decode protobuf: {0}")]
pub struct ProtobufError(&'static str);

enum Wire<'a> {
    Varint,
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
                varint(b, &mut i)?;
                out.push((num, Wire::Varint));
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
        Wire::Varint => Err(ProtobufError("expected a string")),
    }
}

fn bytes<'a>(w: &Wire<'a>) -> Result<&'a [u8], ProtobufError> {
    match w {
        Wire::Bytes(b) => Ok(b),
        Wire::Varint => Err(ProtobufError("expected bytes")),
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

/// Decodes a `k8s\0`-prefixed `runtime.Unknown` holding a v1 Namespace.
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
    if kind != "Namespace" {
        return Err(ProtobufError("only Namespace is accepted as protobuf"));
    }
    let mut obj = json!({"apiVersion": api_version, "kind": kind, "metadata": {}});
    for (n, w) in fields(raw)? {
        if n == 1 {
            obj["metadata"] = object_meta(bytes(&w)?)?;
        }
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(n: u8, b: &[u8]) -> Vec<u8> {
        let mut v = vec![(n << 3) | 2, b.len() as u8];
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
}
