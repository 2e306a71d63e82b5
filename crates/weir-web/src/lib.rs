//! Weir's HTTP endpoint, off unless asked for (`SET 'rest.port'`, `weir run --web`,
//! `weir worker --web`, [`serve`] in the embedded API): a job's metrics in Prometheus' text
//! format at `/metrics`, a REST API in JSON (Flink's paths where Flink has one) and a web
//! dashboard, all served from the binary.
//!
//! It reads the jobs' counters and never waits on a job: every request runs in its own task
//! and takes a snapshot of relaxed atomics, so a slow or stalled client holds up nobody but
//! itself.

mod assets;
mod jobs;
mod prometheus;
mod rest;

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use weir_core::{Result, WeirError};

pub use jobs::{Jobs, Rate, Watched};

/// How often rates (rows per second, busy and backpressured time) are computed.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// A running endpoint; dropping it stops it.
pub struct WebServer {
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    sampler: tokio::task::JoinHandle<()>,
}

impl WebServer {
    /// Where it listens (the port chosen, if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        self.server.abort();
        self.sampler.abort();
    }
}

/// `[ADDR:]PORT` → a socket address; a bare port listens on loopback only.
pub fn parse_addr(text: &str) -> Result<SocketAddr> {
    let text = text.trim();
    let full = if text.chars().all(|c| c.is_ascii_digit()) { format!("127.0.0.1:{text}") } else { text.to_string() };
    full.parse().map_err(|_| {
        WeirError::user(format!("'{text}' is not a web address: give PORT or ADDRESS:PORT (e.g. 8081 or 0.0.0.0:8081)"))
    })
}

/// Listen on `addr` and serve `jobs` until the returned server is dropped. A port in use is
/// an error here, before any job runs. Must be called inside a Tokio runtime.
pub async fn serve(addr: SocketAddr, jobs: Jobs) -> Result<WebServer> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| WeirError::user(format!("web endpoint: cannot listen on {addr}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| WeirError::external(format!("web endpoint: {e}")))?;
    let app = Router::new()
        .route("/", get(|| async { assets::page("index.html") }))
        .route("/assets/{file}", get(|Path(file): Path<String>| async move { assets::page(&file) }))
        .route("/metrics", get(metrics))
        .route("/overview", get(|State(jobs): State<Jobs>| async move { json(rest::overview(&jobs)) }))
        .route("/jobs", get(|State(jobs): State<Jobs>| async move { json(rest::list(&jobs, false)) }))
        .route("/jobs/overview", get(|State(jobs): State<Jobs>| async move { json(rest::list(&jobs, true)) }))
        .route("/jobs/{id}", get(|s: State<Jobs>, p: Path<String>| async move { of_job(s, p, "") }))
        .route(
            "/jobs/{id}/{what}",
            get(|s, Path((id, what)): Path<(String, String)>| async move { of_job(s, Path(id), &what) }),
        )
        .fallback(|uri: Uri| async move { not_found(uri.path()) })
        .with_state(jobs.clone());
    log::info!("web endpoint on http://{addr}/ (metrics at /metrics)");
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            log::warn!("web endpoint stopped: {e}");
        }
    });
    let sampler = jobs.sampler(SAMPLE_INTERVAL);
    Ok(WebServer { addr, server, sampler })
}

async fn metrics(State(jobs): State<Jobs>) -> Response {
    match prometheus::render(&jobs) {
        Ok(text) => ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "metrics could not be written").into_response(),
    }
}

fn of_job(State(jobs): State<Jobs>, Path(id): Path<String>, what: &str) -> Response {
    let Some(job) = id.parse::<u64>().ok().and_then(|id| jobs.get(id)) else {
        return not_found(&format!("/jobs/{id}"));
    };
    match what {
        "" => json(rest::job(&jobs, &job)),
        "checkpoints" => json(rest::checkpoints(&job)),
        "exceptions" => json(rest::exceptions(&job)),
        "guarantee" => json(rest::guarantee(&job)),
        _ => not_found(&format!("/jobs/{id}/{what}")),
    }
}

fn json(value: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

/// Flink's shape for errors: `{"errors": [...]}`.
fn not_found(path: &str) -> Response {
    let body = serde_json::json!({ "errors": [format!("Not found: {path}")] });
    (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_port_listens_on_loopback() {
        assert_eq!(parse_addr("8081").ok(), "127.0.0.1:8081".parse().ok());
        assert_eq!(parse_addr("0.0.0.0:9000").ok(), "0.0.0.0:9000".parse().ok());
        assert_eq!(parse_addr("[::1]:9000").ok(), "[::1]:9000".parse().ok());
        let e = parse_addr("localhost").expect_err("not an address");
        assert_eq!(
            e.to_string(),
            "'localhost' is not a web address: give PORT or ADDRESS:PORT (e.g. 8081 or 0.0.0.0:8081)"
        );
    }

    #[test]
    fn task_names_give_the_operator_and_its_index() {
        assert_eq!(prometheus::split_name("Sink: out [3]"), ("Sink: out", 3));
        assert_eq!(prometheus::split_name("Values"), ("Values", 0));
        assert_eq!(prometheus::split_name("Filter: a [b] [1]"), ("Filter: a [b]", 1));
        assert_eq!(prometheus::split_name("Sink: late (late rows)"), ("Sink: late (late rows)", 0));
    }
}
