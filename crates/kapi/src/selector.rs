//! Label and field selectors, parsed the way the kube-apiserver parses them
//! (k8s.io/apimachinery `labels.Parse` and `fields.ParseSelector`).

use std::collections::BTreeMap;

/// A selector the server could not parse; answered with 400 BadRequest.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("unable to parse requirement: {0}")]
    Label(String),
    #[error("invalid field selector: {0}")]
    Field(String),
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Splits on commas outside parentheses, as `a in (x,y),b` has two terms.
fn split_terms(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced parenthesis in {s:?}"));
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced parenthesis in {s:?}"));
    }
    out.push(&s[start..]);
    Ok(out)
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let s = s.trim();
        let mut reqs = Vec::new();
        if s.is_empty() {
            return Ok(Self { reqs });
        }
        for term in split_terms(s).map_err(SelectorError::Label)? {
            reqs.push(parse_requirement(term.trim()).map_err(SelectorError::Label)?);
        }
        Ok(Self { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// The values label `key` may take under this selector, when a `key =
    /// v` or `key in (…)` requirement narrows it (every such requirement
    /// holds: their intersection); `None` when none does. A server that
    /// lets a client see only some values of a label checks this.
    pub fn pinned_values(&self, key: &str) -> Option<Vec<&str>> {
        let mut out: Option<Vec<&str>> = None;
        for r in self.reqs.iter().filter(|r| r.key == key) {
            let these: Vec<&str> = match &r.op {
                Op::Eq(x) => vec![x.as_str()],
                Op::In(xs) => xs.iter().map(String::as_str).collect(),
                _ => continue,
            };
            out = Some(match out {
                None => these,
                Some(before) => before.into_iter().filter(|v| these.contains(v)).collect(),
            });
        }
        out
    }

    /// Whether labels that `get` looks up by key match.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|r| {
            let v = get(&r.key);
            match &r.op {
                Op::Eq(x) => v == Some(x.as_str()),
                Op::NotEq(x) => v != Some(x.as_str()),
                Op::In(xs) => v.is_some_and(|v| xs.iter().any(|x| x == v)),
                Op::NotIn(xs) => v.is_none_or(|v| !xs.iter().any(|x| x == v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
            }
        })
    }
}

fn parse_requirement(t: &str) -> Result<Requirement, String> {
    if t.is_empty() {
        return Err("empty requirement".into());
    }
    if let Some(k) = t.strip_prefix('!') {
        let k = k.trim();
        if !valid_key(k) {
            return Err(format!("invalid label key {k:?}"));
        }
        return Ok(Requirement {
            key: k.into(),
            op: Op::DoesNotExist,
        });
    }
    // Set-based: `key in (a,b)` / `key notin (a,b)`.
    if let Some(open) = t.find('(') {
        let head = t[..open].trim();
        let rest = t[open..].trim();
        if !rest.ends_with(')') {
            return Err(format!("missing ')' in {t:?}"));
        }
        let inner = &rest[1..rest.len() - 1];
        let mut words = head.split_whitespace();
        let key = words
            .next()
            .ok_or_else(|| format!("missing key in {t:?}"))?;
        let op = words
            .next()
            .ok_or_else(|| format!("missing operator in {t:?}"))?;
        if words.next().is_some() || !valid_key(key) {
            return Err(format!("invalid requirement {t:?}"));
        }
        let values: Vec<String> = inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() && op == "in" {
            return Err(format!(
                "for 'in' operator, values set can't be empty: {t:?}"
            ));
        }
        if let Some(bad) = values.iter().find(|v| !valid_value(v)) {
            return Err(format!("invalid label value {bad:?}"));
        }
        let op = match op {
            "in" => Op::In(values),
            "notin" => Op::NotIn(values),
            other => return Err(format!("unknown operator {other:?}")),
        };
        return Ok(Requirement {
            key: key.into(),
            op,
        });
    }
    let (key, op, value) = if let Some((k, v)) = t.split_once("!=") {
        (k, "!=", v)
    } else if let Some((k, v)) = t.split_once("==") {
        (k, "=", v)
    } else if let Some((k, v)) = t.split_once('=') {
        (k, "=", v)
    } else {
        let k = t.trim();
        if !valid_key(k) {
            return Err(format!("invalid label key {k:?}"));
        }
        return Ok(Requirement {
            key: k.into(),
            op: Op::Exists,
        });
    };
    let (key, value) = (key.trim(), value.trim());
    if !valid_key(key) {
        return Err(format!("invalid label key {key:?}"));
    }
    if !valid_value(value) {
        return Err(format!("invalid label value {value:?}"));
    }
    let op = if op == "!=" {
        Op::NotEq(value.into())
    } else {
        Op::Eq(value.into())
    };
    Ok(Requirement {
        key: key.into(),
        op,
    })
}

/// Fields a `fieldSelector` may name, per kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    Name,
    Namespace,
    NodeName,
    Phase,
}

impl Field {
    fn parse(s: &str, allowed: &[Field]) -> Result<Field, SelectorError> {
        let f = match s {
            "metadata.name" => Field::Name,
            "metadata.namespace" => Field::Namespace,
            "spec.nodeName" => Field::NodeName,
            "status.phase" => Field::Phase,
            other => return Err(SelectorError::UnsupportedField(other.into())),
        };
        if allowed.contains(&f) {
            Ok(f)
        } else {
            Err(SelectorError::UnsupportedField(s.into()))
        }
    }
}

/// A parsed `fieldSelector`: `=`, `==` and `!=` terms, all must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(Field, bool, String)>,
}

impl FieldSelector {
    pub fn parse(s: &str, allowed: &[Field]) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = t.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = t.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = t.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError::Field(format!("{t:?} has no operator")));
            };
            terms.push((Field::parse(k.trim(), allowed)?, eq, v.trim().to_string()));
        }
        Ok(Self { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// `get` returns the object's value of a field ("" when unset, as the
    /// apiserver's field sets do).
    pub fn matches<'a>(&self, get: impl Fn(Field) -> &'a str) -> bool {
        self.terms.iter().all(|(f, eq, v)| (get(*f) == v) == *eq)
    }

    /// The name a `metadata.name=X` term pins, so a get can replace a scan.
    pub fn pinned_name(&self) -> Option<&str> {
        self.pinned(Field::Name)
    }

    /// The value an `f=X` term pins: only objects with it match, so a
    /// server can index the watchers by it (`spec.nodeName`).
    pub fn pinned(&self, field: Field) -> Option<&str> {
        self.terms
            .iter()
            .find(|(f, eq, _)| *f == field && *eq)
            .map(|(_, _, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_values_are_the_intersection_of_eq_and_in() {
        let p = |s: &str, k: &str| {
            LabelSelector::parse(s)
                .unwrap()
                .pinned_values(k)
                .map(|v| v.into_iter().map(str::to_owned).collect::<Vec<_>>())
        };
        assert_eq!(p("g in (a,b),x=y", "g"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(p("g=a", "g"), Some(vec!["a".into()]));
        assert_eq!(p("g in (a,b),g in (b,c)", "g"), Some(vec!["b".into()]));
        assert_eq!(p("g notin (a),g", "g"), None);
        assert_eq!(p("", "g"), None);
        assert_eq!(p("h=a", "g"), None);
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_forms() {
        let l = labels(&[("app", "x"), ("tier", "web")]);
        assert!(LabelSelector::parse("app=x").unwrap().matches(&l));
        assert!(LabelSelector::parse("app==x").unwrap().matches(&l));
        assert!(!LabelSelector::parse("app!=x").unwrap().matches(&l));
        assert!(LabelSelector::parse("app!=y").unwrap().matches(&l));
        assert!(LabelSelector::parse("app=x,tier=web").unwrap().matches(&l));
        assert!(!LabelSelector::parse("app=x,tier=db").unwrap().matches(&l));
        // A missing label is "not equal".
        assert!(LabelSelector::parse("zone!=a").unwrap().matches(&l));
    }

    #[test]
    fn set_forms() {
        let l = labels(&[("app", "x"), ("tier", "web")]);
        assert!(LabelSelector::parse("app in (x, y)").unwrap().matches(&l));
        assert!(!LabelSelector::parse("app in (y,z)").unwrap().matches(&l));
        assert!(LabelSelector::parse("app notin (y,z)").unwrap().matches(&l));
        assert!(LabelSelector::parse("zone notin (a)").unwrap().matches(&l));
        assert!(LabelSelector::parse("app").unwrap().matches(&l));
        assert!(!LabelSelector::parse("!app").unwrap().matches(&l));
        assert!(LabelSelector::parse("!zone").unwrap().matches(&l));
        assert!(
            LabelSelector::parse("app in (x,y),tier,!zone")
                .unwrap()
                .matches(&l)
        );
        assert!(LabelSelector::parse("").unwrap().is_empty());
    }

    #[test]
    fn bad_label_selectors() {
        for s in ["app in (x", "a=b=c=(", "=x", "app in ()", "a b", "a=b)"] {
            assert!(LabelSelector::parse(s).is_err(), "{s} should not parse");
        }
    }

    #[test]
    fn field_selectors() {
        let all = [Field::Name, Field::Namespace, Field::NodeName, Field::Phase];
        let get = |f| match f {
            Field::Name => "p",
            Field::Namespace => "ns",
            Field::NodeName => "",
            Field::Phase => "Running",
        };
        let s = FieldSelector::parse("metadata.name=p,status.phase!=Pending", &all).unwrap();
        assert!(s.matches(get));
        assert_eq!(s.pinned_name(), Some("p"));
        assert!(
            FieldSelector::parse("spec.nodeName==", &all)
                .unwrap()
                .matches(get)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace=other", &all)
                .unwrap()
                .matches(get)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=1", &all),
            Err(SelectorError::UnsupportedField("spec.foo".into()))
        );
        assert!(FieldSelector::parse("spec.nodeName=a", &[Field::Name]).is_err());
        assert!(FieldSelector::parse("nonsense", &all).is_err());
    }
}
