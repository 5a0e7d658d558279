//! What a declared field can hold ([`Value`]): how each value type is read
//! from Protobuf and written to Protobuf and JSON. (Its JSON decoding is
//! its [`Shape`](super::loose::Shape).) The declared messages are values
//! too (`fields!` implements this trait for them).

use super::loose::{Empty, IntOrStr, KeyFilter, Loose, StrMap, Time};
use super::proto::{Val, fields, put_bytes, put_int, put_message, str_of, sub};

/// A value that a typed client (kubectl, kube-rs with `k8s-openapi`)
/// could not read as the API's schema types it, so it is not served: an
/// `int32` out of range, a time that does not parse, a required field
/// missing. The API server never sends one; podns may hold one that its
/// own checks let through (a bad `deletionTimestamp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot be served: {0}")]
pub struct Unfit(pub &'static str);

/// What a field holds, as the two wires carry it.
pub trait Value: Sized {
    /// One occurrence of the field in a Protobuf message, into its slot: a
    /// singular field keeps the last occurrence, a repeated one appends it,
    /// a map adds its entry. A value of the wrong wire type is `Bad`.
    fn merge_pb(slot: &mut Loose<Self>, v: Val<'_>) {
        *slot = Self::from_pb(v).map_or(Loose::Bad, Loose::Ok);
    }
    /// One occurrence, alone; `None` when it has the wrong wire type.
    fn from_pb(v: Val<'_>) -> Option<Self>;
    /// The value as field `num` (as many fields as elements, for a
    /// repeated one).
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit>;
    /// The value as JSON.
    fn write_json(&self, w: &mut Vec<u8>);
}

/// A JSON string, escaped.
pub fn json_str(w: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(w, s).expect("a string serializes into a Vec");
}

/// `"key":`, after a comma unless it is the first of its object.
pub fn json_key(w: &mut Vec<u8>, key: &str, first: &mut bool) {
    if !std::mem::take(first) {
        w.push(b',');
    }
    json_str(w, key);
    w.push(b':');
}

impl Value for String {
    fn from_pb(v: Val<'_>) -> Option<Self> {
        str_of(v).map(str::to_owned)
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        put_bytes(w, num, self.as_bytes());
        Ok(())
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        json_str(w, self);
    }
}

impl Value for bool {
    fn from_pb(v: Val<'_>) -> Option<Self> {
        match v {
            Val::Varint(n) => Some(n != 0),
            _ => None,
        }
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        put_int(w, num, i64::from(*self));
        Ok(())
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        w.extend_from_slice(if *self { b"true" } else { b"false" });
    }
}

/// An `int32` (ports, a Job's counts): read as any varint (a negative one
/// is sign-extended to ten bytes), served only within `int32`.
impl Value for i64 {
    fn from_pb(v: Val<'_>) -> Option<Self> {
        match v {
            Val::Varint(n) => Some(n as i64),
            _ => None,
        }
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        put_int(w, num, int32(*self)?);
        Ok(())
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        use std::io::Write;
        write!(w, "{self}").expect("a number writes into a Vec");
    }
}

fn int32(n: i64) -> Result<i64, Unfit> {
    i32::try_from(n)
        .map(i64::from)
        .map_err(|_| Unfit("an int32 out of range"))
}

/// `intstr.IntOrString` (`type` = 1: 0 int, 1 string; `intVal` = 2;
/// `strVal` = 3).
impl Value for IntOrStr {
    fn from_pb(v: Val<'_>) -> Option<Self> {
        let (mut is_str, mut int, mut s) = (false, 0i64, "");
        for f in fields(sub(v)?) {
            match f.ok()? {
                (1, v) => is_str = matches!(v, Val::Varint(1)),
                (2, Val::Varint(n)) => int = n as i64,
                (3, v) => s = str_of(v)?,
                (2, _) => return None,
                _ => {}
            }
        }
        Some(if is_str {
            IntOrStr::Str(s.to_owned())
        } else {
            IntOrStr::Int(int)
        })
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        put_message(w, num, |w| {
            match self {
                IntOrStr::Int(n) => {
                    put_int(w, 1, 0);
                    put_int(w, 2, int32(*n)?);
                }
                IntOrStr::Str(s) => {
                    put_int(w, 1, 1);
                    put_bytes(w, 3, s.as_bytes());
                }
            }
            Ok(())
        })
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        match self {
            IntOrStr::Int(n) => n.write_json(w),
            IntOrStr::Str(s) => json_str(w, s),
        }
    }
}

/// `metav1.Time` (`seconds` = 1, `nanos` = 2). kube-apiserver keeps whole
/// seconds (its JSON has no more, and its Protobuf leaves `nanos` out), so
/// a time is served as its seconds and `nanos` 0; an empty message is the
/// zero time, absent, as JSON's `null`.
impl Value for Time {
    fn merge_pb(slot: &mut Loose<Self>, v: Val<'_>) {
        *slot = match v {
            Val::Bytes([]) => Loose::Absent,
            _ => Self::from_pb(v).map_or(Loose::Bad, Loose::Ok),
        };
    }
    fn from_pb(v: Val<'_>) -> Option<Self> {
        let mut secs = 0i64;
        for f in fields(sub(v)?) {
            match f.ok()? {
                (1, Val::Varint(n)) => secs = n as i64,
                (1, _) => return None,
                _ => {}
            }
        }
        let t = jiff::Timestamp::from_second(secs).ok()?;
        Some(Time(t.to_string()))
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        let t: jiff::Timestamp = self.0.parse().map_err(|_| Unfit("a time"))?;
        put_message(w, num, |w| {
            put_int(w, 1, t.as_second());
            put_int(w, 2, 0);
            Ok(())
        })
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        json_str(w, &self.0);
    }
}

/// Any value, read as nothing; written as an empty message (`{}`).
impl Value for Empty {
    fn from_pb(_: Val<'_>) -> Option<Self> {
        Some(Empty)
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        put_message::<Unfit>(w, num, |_| Ok(()))
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        w.extend_from_slice(b"{}");
    }
}

/// A repeated field: each occurrence is an element.
impl<T: Value> Value for Vec<Loose<T>> {
    fn merge_pb(slot: &mut Loose<Self>, v: Val<'_>) {
        let mut item = Loose::Absent;
        T::merge_pb(&mut item, v);
        match slot {
            Loose::Ok(items) => items.push(item),
            _ => *slot = Loose::Ok(vec![item]),
        }
    }
    fn from_pb(v: Val<'_>) -> Option<Self> {
        let mut slot = Loose::Absent;
        Self::merge_pb(&mut slot, v);
        slot.into_option()
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        for item in self.iter().filter_map(Loose::get) {
            item.write_pb(num, w)?;
        }
        Ok(())
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        w.push(b'[');
        for (i, item) in self.iter().filter_map(Loose::get).enumerate() {
            if i > 0 {
                w.push(b',');
            }
            item.write_json(w);
        }
        w.push(b']');
    }
}

/// A `map<string, string>`: each occurrence is an entry (`key` = 1,
/// `value` = 2), kept when `F` keeps its key (a dropped key is never
/// allocated); a repeated key replaces the earlier one, as in a Go map.
/// Written sorted by key, each key once (the last), an empty key or
/// value left out of its entry, as Kubernetes and prost write maps.
impl<F: KeyFilter> Value for StrMap<F> {
    fn merge_pb(slot: &mut Loose<Self>, v: Val<'_>) {
        let map = slot.or_default_mut();
        let Some((k, val)) = entry(v) else {
            return map.set_bad();
        };
        if F::keep(k) {
            match map.entries.iter_mut().find(|(ek, _)| ek == k) {
                Some(e) => val.clone_into(&mut e.1),
                None => map.entries.push((k.to_owned(), val.to_owned())),
            }
        }
    }
    fn from_pb(v: Val<'_>) -> Option<Self> {
        let mut slot = Loose::Absent;
        Self::merge_pb(&mut slot, v);
        slot.into_option()
    }
    fn write_pb(&self, num: u32, w: &mut Vec<u8>) -> Result<(), Unfit> {
        for_each_sorted(&self.entries, |k, v| {
            put_message::<Unfit>(w, num, |w| {
                if !k.is_empty() {
                    put_bytes(w, 1, k.as_bytes());
                }
                if !v.is_empty() {
                    put_bytes(w, 2, v.as_bytes());
                }
                Ok(())
            })
        })
    }
    fn write_json(&self, w: &mut Vec<u8>) {
        w.push(b'{');
        let mut first = true;
        let _ = for_each_sorted(&self.entries, |k, v| {
            json_key(w, k, &mut first);
            json_str(w, v);
            Ok(())
        });
        w.push(b'}');
    }
}

/// A map entry's key and value.
fn entry(v: Val<'_>) -> Option<(&str, &str)> {
    let (mut k, mut val) = ("", "");
    for f in fields(sub(v)?) {
        match f.ok()? {
            (1, v) => k = str_of(v)?,
            (2, v) => val = str_of(v)?,
            _ => {}
        }
    }
    Some((k, val))
}

/// The entries by key, each key once (its last value).
fn for_each_sorted(
    entries: &[(String, String)],
    mut f: impl FnMut(&str, &str) -> Result<(), Unfit>,
) -> Result<(), Unfit> {
    if entries.windows(2).all(|p| p[0].0 < p[1].0) {
        // As the API server sends them.
        return entries.iter().try_for_each(|(k, v)| f(k, v));
    }
    let mut sorted: Vec<&(String, String)> = entries.iter().collect();
    // Stable: of one key's entries, the last in wire order stays last.
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    for (i, (k, v)) in sorted.iter().enumerate() {
        if sorted.get(i + 1).is_none_or(|next| next.0 != *k) {
            f(k, v)?;
        }
    }
    Ok(())
}
