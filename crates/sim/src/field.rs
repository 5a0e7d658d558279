//! Field errors as apimachinery's `field.Error` prints them, and the 422
//! `Invalid` Status the apiserver builds from a list of them
//! (`errors.NewInvalid`): the message aggregates every error, and each one
//! becomes a cause with `reason`, `message` and `field`.

use serde_json::{Value, json};

use podns_kapi::{ApiError, Kind};

/// The bad value of an error, printed the way Go's `%q` / `%#v` print it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadValue {
    /// A string (or a named string type such as `IPFamily`): `"IPv6"`.
    Str(String),
    /// A slice, with its Go element type: `[]string{"10.0.0.1"}`.
    List(&'static str, Vec<String>),
    /// A nil pointer: `null`.
    Null,
}

impl BadValue {
    fn render(&self) -> String {
        match self {
            BadValue::Str(s) => go_quote(s),
            BadValue::List(ty, items) if items.is_empty() => format!("[]{ty}(nil)"),
            BadValue::List(ty, items) => {
                let items: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
                format!("[]{ty}{{{}}}", items.join(", "))
            }
            BadValue::Null => "null".into(),
        }
    }

    pub fn opt(v: Option<&str>) -> BadValue {
        v.map_or(BadValue::Null, |s| BadValue::Str(s.to_string()))
    }
}

/// Go's `%q` for the strings these errors carry.
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serializes")
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Type {
    Invalid(BadValue),
    Required,
    Forbidden,
    NotSupported(BadValue, &'static [&'static str]),
    Duplicate(BadValue),
}

/// One `field.Error`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    ty: Type,
    detail: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: BadValue, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            ty: Type::Invalid(value),
            detail: detail.into(),
        }
    }
    pub fn required(field: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            ty: Type::Required,
            detail: String::new(),
        }
    }
    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            ty: Type::Forbidden,
            detail: detail.into(),
        }
    }
    /// `supported` in the order apimachinery lists them (sorted).
    pub fn not_supported(
        field: impl Into<String>,
        value: BadValue,
        supported: &'static [&'static str],
    ) -> Self {
        Self {
            field: field.into(),
            ty: Type::NotSupported(value, supported),
            detail: String::new(),
        }
    }
    pub fn duplicate(field: impl Into<String>, value: BadValue) -> Self {
        Self {
            field: field.into(),
            ty: Type::Duplicate(value),
            detail: String::new(),
        }
    }

    /// The `reason` of the Status cause (`metav1.CauseType`).
    pub fn reason(&self) -> &'static str {
        match self.ty {
            Type::Invalid(_) => "FieldValueInvalid",
            Type::Required => "FieldValueRequired",
            Type::Forbidden => "FieldValueForbidden",
            Type::NotSupported(..) => "FieldValueNotSupported",
            Type::Duplicate(_) => "FieldValueDuplicate",
        }
    }

    /// `ErrorBody()`: the message without the field path.
    pub fn body(&self) -> String {
        let mut s = match &self.ty {
            Type::Invalid(v) => format!("Invalid value: {}", v.render()),
            Type::Required => "Required value".to_string(),
            Type::Forbidden => "Forbidden".to_string(),
            Type::NotSupported(v, supported) => {
                let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
                format!(
                    "Unsupported value: {}: supported values: {}",
                    v.render(),
                    list.join(", ")
                )
            }
            Type::Duplicate(v) => format!("Duplicate value: {}", v.render()),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// `errors.NewInvalid(kind, name, errs)`: 422, reason `Invalid`, one
/// cause per error; the message lists each distinct error once, in
/// brackets when there are several.
pub fn invalid_fields(kind: Kind, name: &str, errs: &[FieldError]) -> ApiError {
    let mut seen: Vec<String> = Vec::new();
    for e in errs {
        let m = e.to_string();
        if !seen.contains(&m) {
            seen.push(m);
        }
    }
    let agg = match seen.len() {
        1 => seen.remove(0),
        _ => format!("[{}]", seen.join(", ")),
    };
    let causes: Vec<Value> = errs
        .iter()
        .map(|e| json!({"reason": e.reason(), "message": e.body(), "field": e.field}))
        .collect();
    let mut details = json!({"name": name, "kind": kind.name(), "causes": causes});
    if !kind.group().is_empty() {
        details["group"] = kind.group().into();
    }
    ApiError::new(
        422,
        "Invalid",
        format!("{} \"{name}\" is invalid: {agg}", kind.name()),
    )
    .with_details(details)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_print_like_apimachinery() {
        let e = FieldError::invalid(
            "spec.ipFamilyPolicy",
            BadValue::Str("RequireDualStack".into()),
            "this cluster is not configured for dual-stack services",
        );
        assert_eq!(
            e.to_string(),
            "spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"
        );
        let e = FieldError::invalid(
            "spec.clusterIPs",
            BadValue::List("string", vec!["1.1.1.1".into(), "fd00::1".into()]),
            "x",
        );
        assert_eq!(
            e.body(),
            "Invalid value: []string{\"1.1.1.1\", \"fd00::1\"}: x"
        );
        let e = FieldError::not_supported(
            "spec.ipFamilies[0]",
            BadValue::Str("IPv5".into()),
            &["IPv4", "IPv6"],
        );
        assert_eq!(
            e.body(),
            "Unsupported value: \"IPv5\": supported values: \"IPv4\", \"IPv6\""
        );
        assert_eq!(e.reason(), "FieldValueNotSupported");
        assert_eq!(
            FieldError::required("spec.clusterIPs").body(),
            "Required value"
        );
        assert_eq!(
            FieldError::forbidden(
                "spec.ipFamilies",
                "may not be set for ExternalName services"
            )
            .body(),
            "Forbidden: may not be set for ExternalName services"
        );
    }

    #[test]
    fn status_aggregates_and_lists_causes() {
        let a = FieldError::invalid("spec.a", BadValue::Null, "bad");
        let b = FieldError::duplicate("spec.b[1]", BadValue::Str("IPv4".into()));
        let one = invalid_fields(Kind::Service, "web", std::slice::from_ref(&a));
        assert_eq!(
            one.message,
            "Service \"web\" is invalid: spec.a: Invalid value: null: bad"
        );
        let two = invalid_fields(Kind::Service, "web", &[a.clone(), b, a]);
        assert_eq!(
            two.message,
            "Service \"web\" is invalid: [spec.a: Invalid value: null: bad, spec.b[1]: Duplicate value: \"IPv4\"]"
        );
        let s = two.status();
        assert_eq!(
            (s["code"].as_u64(), s["reason"].as_str()),
            (Some(422), Some("Invalid"))
        );
        let causes = s["details"]["causes"].as_array().unwrap();
        assert_eq!(causes.len(), 3);
        assert_eq!(
            causes[1],
            json!({"reason": "FieldValueDuplicate", "message": "Duplicate value: \"IPv4\"", "field": "spec.b[1]"})
        );
        assert!(s["details"].get("group").is_none());
        assert_eq!(s["details"]["kind"], "Service");
    }
}
