//! Scenario files: a YAML or JSON list of objects created at start.

use serde_json::{Value, json};

use super::{Workload, WorkloadError};
use crate::store::{ApiError, Kind, Store};

impl Workload {
    /// Creates each object of a scenario (namespaces made as needed).
    pub fn load_scenario(&self, text: &str) -> Result<usize, WorkloadError> {
        let mut objs = Vec::new();
        let docs: Vec<Value> = serde_saphyr::from_multiple(text)
            .map_err(|e| WorkloadError::ParseScenario(e.to_string()))?;
        for v in docs {
            collect_objects(v, &mut objs);
        }
        let mut n = 0;
        for o in objs {
            let kind = match o["kind"].as_str().and_then(Kind::from_name) {
                Some(k) => k,
                None => {
                    let other = o["kind"].as_str();
                    tracing::warn!(kind = ?other, "scenario object of an unserved kind skipped");
                    continue;
                }
            };
            let ns = o["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            if kind == Kind::Namespace {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                if self.store.get(Kind::Namespace, "", name).is_ok() {
                    continue;
                }
            } else {
                ensure_namespace(&self.store, &ns)?;
            }
            self.store.create(kind, &ns, o)?;
            n += 1;
        }
        Ok(n)
    }
}

fn collect_objects(v: Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(xs) => xs.into_iter().for_each(|x| collect_objects(x, out)),
        Value::Object(mut m) if m.get("items").is_some_and(Value::is_array) => {
            if let Some(Value::Array(xs)) = m.remove("items") {
                xs.into_iter().for_each(|x| collect_objects(x, out));
            }
        }
        Value::Null => {}
        other => out.push(other),
    }
}

/// Creates a namespace unless it exists.
pub fn ensure_namespace(store: &Store, ns: &str) -> Result<(), ApiError> {
    if store.get(Kind::Namespace, "", ns).is_ok() {
        return Ok(());
    }
    match store.create(Kind::Namespace, "", json!({"metadata": {"name": ns}})) {
        Ok(_) => Ok(()),
        Err(e) if e.reason == "AlreadyExists" => Ok(()),
        Err(e) => Err(e),
    }
}
