//! The simulator's own controls under `/sim/`: workload, faults, stats.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::response::Response;
use http::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use podns_kapi::ApiError;

use crate::rest::{self, error_response, value_response};
use crate::state::Sim;
use crate::workload::JobRequest;

fn ok(v: Value) -> Response {
    value_response(200, &v)
}

#[derive(Deserialize)]
struct Churn {
    rate: f64,
    seconds: f64,
}

#[derive(Deserialize, Default)]
struct Restart {
    #[serde(default, rename = "gracePeriodSeconds")]
    grace: Option<u64>,
}

fn seconds(q: &HashMap<String, String>, k: &str) -> Result<f64, ApiError> {
    let s = q
        .get(k)
        .ok_or_else(|| ApiError::bad_request(format!("missing query parameter {k}")))?;
    s.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid {k}: {s:?}")))
}

async fn body<T: for<'de> Deserialize<'de>>(
    req: Request,
    empty_ok: bool,
) -> Result<Option<T>, ApiError> {
    let bytes = rest::read_body(req, 1 << 20).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return if empty_ok {
            Ok(None)
        } else {
            Err(ApiError::bad_request("a JSON body is required"))
        };
    }
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))
}

pub async fn handle(sim: &Arc<Sim>, req: Request, rest: &str) -> Response {
    match route(sim, req, rest).await {
        Ok(r) => r,
        Err(e) => error_response(&e),
    }
}

async fn route(sim: &Arc<Sim>, req: Request, rest: &str) -> Result<Response, ApiError> {
    let q = rest::query(&req)?;
    let segs: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let m = req.method().clone();
    let dur = |k| seconds(&q, k).map(Duration::from_secs_f64);
    match (&m, segs.as_slice()) {
        (&Method::GET, ["stats"]) => Ok(ok(sim.stats_json())),
        (&Method::POST, ["stats", "reset"]) => {
            sim.stats.reset();
            Ok(ok(sim.stats_json()))
        }
        (&Method::POST, ["jobs"]) => {
            let j: JobRequest = body(req, false)
                .await?
                .ok_or_else(|| ApiError::bad_request("a JSON body is required"))?;
            let w = sim.workload.clone();
            let r = tokio::task::spawn_blocking(move || w.create_job(&j))
                .await
                .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))??;
            Ok(value_response(201, &r))
        }
        (&Method::POST, ["jobs", ns, name, "restart"]) => {
            let r: Restart = body(req, true).await?.unwrap_or_default();
            let grace = match q.get("gracePeriodSeconds") {
                Some(g) => Some(
                    g.parse()
                        .map_err(|_| ApiError::bad_request("invalid gracePeriodSeconds"))?,
                ),
                None => r.grace,
            };
            let (w, ns, name) = (sim.workload.clone(), ns.to_string(), name.to_string());
            let r = tokio::task::spawn_blocking(move || w.restart_job(&ns, &name, grace))
                .await
                .map_err(|e| ApiError::new(500, "InternalError", e.to_string()))??;
            Ok(ok(r))
        }
        (&Method::POST, ["churn"]) => {
            let c: Churn = body(req, false)
                .await?
                .ok_or_else(|| ApiError::bad_request("a JSON body is required"))?;
            if !(c.rate.is_finite() && c.rate > 0.0 && c.seconds.is_finite() && c.seconds >= 0.0) {
                return Err(ApiError::bad_request("rate must be > 0 and seconds >= 0"));
            }
            sim.workload
                .start_churn(c.rate, c.seconds, sim.shutdown.clone());
            Ok(ok(
                json!({"rate": c.rate, "seconds": c.seconds, "pods": (c.rate * c.seconds).round()}),
            ))
        }
        (&Method::POST, ["faults", "compact"]) => {
            sim.store.compact();
            Ok(ok(json!({"compacted": sim.store.current_rv()})))
        }
        (&Method::POST, ["faults", "drop-watches"]) => {
            sim.faults.drop_watches();
            Ok(ok(json!({"dropped": true})))
        }
        (&Method::POST, ["faults", "stall-watches"]) => {
            sim.faults.stall_watches();
            Ok(ok(json!({"stalled": true})))
        }
        (&Method::POST, ["faults", "deaf-watches"]) => {
            let count = match q.get("count") {
                Some(c) => c
                    .parse::<u32>()
                    .map_err(|_| ApiError::bad_request(format!("invalid count: {c:?}")))?,
                None => 1,
            };
            let resource = q.get("resource").cloned();
            sim.faults.deaf_watches(resource.clone(), count);
            Ok(ok(json!({"deaf": count, "resource": resource})))
        }
        (&Method::POST, ["faults", "outage"]) => {
            sim.faults.outage(dur("seconds")?);
            Ok(ok(json!({"outage": true})))
        }
        (&Method::POST, ["faults", "throttle"]) => {
            sim.faults.throttle(dur("seconds")?);
            Ok(ok(json!({"throttle": true})))
        }
        (&Method::POST, ["faults", "latency"]) => {
            let ms = seconds(&q, "ms")? as u64;
            sim.faults.latency(ms, dur("seconds")?);
            Ok(ok(json!({"latency_ms": ms})))
        }
        (&Method::POST, ["faults", "clear"]) => {
            sim.faults.clear();
            Ok(ok(json!({"cleared": true})))
        }
        _ => Err(ApiError::new(
            404,
            "NotFound",
            format!("no simulator endpoint {m} /sim/{rest}"),
        )),
    }
}
