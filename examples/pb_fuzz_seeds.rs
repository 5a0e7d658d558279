//! Writes the seeds of the `pb` fuzz target (`fuzz/corpus/pb/`) from the
//! simulator's Protobuf encoder: a list of pods, watch frames (a modified
//! pod, the bookmark that ends a streaming list, an added pod with its
//! length prefix), and a bare pod, Service and Job. Run it when the
//! encoding changes:
//!
//! ```text
//! cargo run --example pb_fuzz_seeds -- fuzz/corpus/pb
//! ```

use std::path::PathBuf;

use podns_sim::pbenc;
use podns_sim::store::Kind;

const SERVICE: &str = r#"{"metadata":{"name":"api","namespace":"ml","uid":"s1","resourceVersion":"4"},
  "spec":{"type":"ClusterIP","clusterIP":"10.96.0.1","clusterIPs":["10.96.0.1","fd00::1"],
    "selector":{"app":"x"},"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":"web"}]}}"#;

const JOB: &str = r#"{"metadata":{"name":"train","namespace":"ml","uid":"j1"},
  "spec":{"completions":4,"parallelism":4,"completionMode":"Indexed"}}"#;

/// The object message of one stored object.
fn object(kind: Kind, json: &str) -> anyhow::Result<Vec<u8>> {
    let item = pbenc::list_item(kind, json.as_bytes())?;
    let object = pbenc::object(&item).ok_or_else(|| anyhow::anyhow!("not a list item"))?;
    Ok(object.to_vec())
}

fn main() -> anyhow::Result<()> {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: pb_fuzz_seeds DIR (e.g. fuzz/corpus/pb)");
        std::process::exit(64);
    };
    std::fs::create_dir_all(&dir)?;
    // A rank of a JobSet as the simulator writes it.
    let pod_json = serde_json::to_vec(&podns_sim::workload::sample_job_pod(false))?;
    let item = pbenc::list_item(Kind::Pod, &pod_json)?;
    let mut list = pbenc::list_head(Kind::Pod, 42, Some("next"), item.len() * 2);
    list.extend_from_slice(&item);
    list.extend_from_slice(&item);
    let pod = pbenc::envelope("v1", "Pod", pbenc::object(&item).expect("an item").to_vec());
    // The fuzz target reads a frame without its 4-byte length, except the
    // one seed that keeps it (the framer's input).
    let frame = |ty: &str, obj: Vec<u8>| pbenc::watch_frame(ty, obj)[4..].to_vec();
    let seeds = [
        ("list-pods", list),
        ("watch-modified-pod", frame("MODIFIED", pod.clone())),
        (
            "watch-bookmark",
            frame("BOOKMARK", pbenc::bookmark_object(Kind::Pod, 99, true)),
        ),
        (
            "watch-stream-added-pod",
            pbenc::watch_frame("ADDED", pod.clone()),
        ),
        ("pod", pod),
        ("service", object(Kind::Service, SERVICE)?),
        ("job", object(Kind::Job, JOB)?),
    ];
    for (name, bytes) in seeds {
        let path = dir.join(name);
        std::fs::write(&path, bytes)?;
        println!("{}", path.display());
    }
    Ok(())
}
