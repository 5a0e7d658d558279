//! What a list or a watch selects: the namespace of its path, its
//! `labelSelector` and its `fieldSelector`, matched against any object
//! that says its namespace, labels and fields ([`Selectable`]).

use crate::ApiError;
use crate::selector::{Field, FieldSelector, LabelSelector};

/// What a selector reads of an object.
pub trait Selectable {
    /// `metadata.namespace` ("" for a cluster-scoped object).
    fn namespace(&self) -> &str;
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;
    /// The value of a selectable field, "" when unset (as the API
    /// server's field sets have it).
    fn field(&self, field: Field) -> &str;
}

/// The servers keep their objects shared.
impl<T: Selectable + ?Sized> Selectable for std::sync::Arc<T> {
    fn namespace(&self) -> &str {
        (**self).namespace()
    }
    fn label(&self, key: &str) -> Option<&str> {
        (**self).label(key)
    }
    fn field(&self, field: Field) -> &str {
        (**self).field(field)
    }
}

/// A request's namespace, labels and fields.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// The namespace of the request's path.
    pub ns: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    /// The filter of a request to path namespace `ns` whose query
    /// parameters `get` returns; `fields` are those its field selector may
    /// name. 400 BadRequest for a selector that does not parse.
    pub fn parse<'a>(
        ns: Option<String>,
        fields: &[Field],
        get: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<Self, ApiError> {
        let bad = |e: crate::selector::SelectorError| ApiError::bad_request(e.to_string());
        Ok(Self {
            ns,
            labels: LabelSelector::parse(get("labelSelector").unwrap_or("")).map_err(bad)?,
            fields: FieldSelector::parse(get("fieldSelector").unwrap_or(""), fields)
                .map_err(bad)?,
        })
    }

    /// The one namespace this filter reads, by path or field selector.
    pub fn namespace(&self) -> Option<&str> {
        self.ns
            .as_deref()
            .or_else(|| self.fields.pinned(Field::Namespace))
    }

    pub fn matches(&self, o: &impl Selectable) -> bool {
        self.ns.as_deref().is_none_or(|ns| ns == o.namespace())
            && self.labels.matches_with(|k| o.label(k))
            && self.fields.matches(|f| o.field(f))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    struct Obj {
        ns: &'static str,
        labels: BTreeMap<&'static str, &'static str>,
        node: &'static str,
    }

    impl Selectable for Obj {
        fn namespace(&self) -> &str {
            self.ns
        }
        fn label(&self, key: &str) -> Option<&str> {
            self.labels.get(key).copied()
        }
        fn field(&self, field: Field) -> &str {
            match field {
                Field::Namespace => self.ns,
                Field::NodeName => self.node,
                _ => "",
            }
        }
    }

    fn filter(
        ns: Option<&str>,
        q: &'static [(&'static str, &'static str)],
    ) -> Result<Filter, ApiError> {
        let fields = [Field::Name, Field::Namespace, Field::NodeName];
        Filter::parse(ns.map(str::to_owned), &fields, |k| {
            q.iter().find(|(n, _)| *n == k).map(|(_, v)| *v)
        })
    }

    #[test]
    fn path_namespace_labels_and_fields_must_all_hold() {
        let o = Obj {
            ns: "ml",
            labels: BTreeMap::from([("job-name", "gpt")]),
            node: "n1",
        };
        assert!(filter(None, &[]).unwrap().matches(&o));
        assert!(
            filter(Some("ml"), &[("labelSelector", "job-name=gpt")])
                .unwrap()
                .matches(&o)
        );
        assert!(!filter(Some("web"), &[]).unwrap().matches(&o));
        assert!(
            !filter(None, &[("labelSelector", "job-name!=gpt")])
                .unwrap()
                .matches(&o)
        );
        let f = filter(
            None,
            &[("fieldSelector", "spec.nodeName=n2,metadata.namespace=ml")],
        )
        .unwrap();
        assert!(!f.matches(&o));
        assert_eq!(f.namespace(), Some("ml"));
        let e = filter(None, &[("fieldSelector", "status.phase=Running")]).unwrap_err();
        assert_eq!((e.code, e.reason), (400, "BadRequest"));
        assert!(filter(None, &[("labelSelector", "a in (b")]).is_err());
    }
}
