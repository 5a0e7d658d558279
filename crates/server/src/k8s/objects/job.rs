//! Jobs (batch/v1), for the rank view: their size, what the relay serves,
//! and the index input ([`JobInfo`]).

use podns_kapi::Kind;

use super::loose::{Empty, Loose};
use super::meta::Meta;
use super::served::Relayed;
use crate::index::types::{JobInfo, Update};
use crate::k8s::convert::{ConvertError, key};

fields! {
    /// `spec` of a batch/v1 Job, as far as the rank view cares.
    pub struct JobSpecRaw {
        pub parallelism: Loose<i64> = ("parallelism", 1),
        pub completions: Loose<i64> = ("completions", 2),
        /// Never read: required by the API's schema, so the relay serves
        /// it, empty (it serves no pod template).
        pub template: Loose<Empty> = ("template", 6),
    }
}

fields! {
    pub struct JobRaw {
        pub metadata: Loose<Meta> = ("metadata", 1),
        pub spec: Loose<JobSpecRaw> = ("spec", 2),
    }
}

slim! {
    /// A batch/v1 Job with only what the rank view reads.
    pub struct SlimJob: JobRaw(Kind::Job, NamespaceResourceScope) -> JobInfo, convert, Update::Job, relayed {
        pub spec: JobSpecRaw,
    }
}

/// The index input of a Job (rank view).
fn convert(j: &SlimJob) -> Result<JobInfo, ConvertError> {
    let key = key(&j.metadata)?;
    let count = |v: &Loose<i64>| v.get().and_then(|n| u32::try_from(*n).ok());
    Ok(JobInfo {
        key,
        uid: j.metadata.uid.clone().unwrap_or_default(),
        completions: count(&j.spec.completions),
        parallelism: count(&j.spec.parallelism),
        labels: j.meta.labels.clone(),
    })
}

impl Relayed for SlimJob {
    fn rules(raw: &mut JobRaw) {
        raw.spec.or_default_mut().template = Loose::Ok(Empty);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::objects::Slim;
    use crate::k8s::objects::served::tests::round_trip;
    use serde_json::json;

    /// JSON and Protobuf (the simulator's encoder) decode alike; the relay
    /// serves what an independent encoder makes of the served JSON, and
    /// what it serves decodes back to it.
    #[test]
    fn jobs_round_trip() {
        let j: SlimJob = round_trip(
            &json!({"metadata":{"name":"train","namespace":"ml","uid":"j1","labels":{"a":"b"}},
          "spec":{"completions":4,"parallelism":4,"completionMode":"Indexed","template":{}}}),
        );
        let info = j.convert().unwrap();
        assert_eq!((info.completions, info.parallelism), (Some(4), Some(4)));
        round_trip::<SlimJob>(&json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "llm", "namespace": "ml", "uid": "u-2", "resourceVersion": "11",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": "llm"},
                         "annotations": {"jobset.sigs.k8s.io/replicatedjob-replicas": "1"}},
            "spec": {"completions": 4, "parallelism": 4, "completionMode": "Indexed",
                     "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
            "status": {"active": 4, "ready": 4},
        }));
    }

    #[test]
    fn a_template_of_any_shape_is_no_malformed_job() {
        for template in [json!(1.5), json!("x"), json!([1]), json!(null)] {
            let j: SlimJob =
                serde_json::from_value(json!({"metadata": {"name": "a", "namespace": "ml"},
                "spec": {"completions": 2, "template": template}}))
                .unwrap();
            assert_eq!(j.malformed, None, "{template}");
        }
    }
}
