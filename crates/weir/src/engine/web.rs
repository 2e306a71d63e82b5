//! The engine's web endpoint: serving its jobs' metrics, REST API and dashboard, and the
//! list of jobs it shows.

use weir_core::{Result, WeirError};
use weir_runtime::JobHandle;

use super::{Engine, State};

impl Engine {
    /// Serve `/metrics`, the REST API and the dashboard of this engine's jobs on `addr`
    /// (`PORT` listens on loopback; `ADDRESS:PORT`; port 0 picks one), until the engine is
    /// dropped. Returns the address it listens on. Once only: a second call is an error.
    pub async fn serve_http(&self, addr: &str) -> Result<std::net::SocketAddr> {
        let addr = weir_web::parse_addr(addr)?;
        if let Some(running) = self.web.lock().ok().and_then(|w| w.as_ref().map(|w| w.local_addr())) {
            return Err(WeirError::user(format!("the web endpoint already runs on {running}")));
        }
        let server = weir_web::serve(addr, self.watched.clone()).await?;
        let at = server.local_addr();
        if let Ok(mut web) = self.web.lock() {
            *web = Some(server);
        }
        Ok(at)
    }

    /// The jobs the web endpoint shows: a program that runs jobs of its own (a worker's
    /// tasks) adds them here.
    pub fn watched(&self) -> weir_web::Jobs {
        self.watched.clone()
    }

    /// Where the web endpoint listens, if it runs.
    pub fn web_addr(&self) -> Option<std::net::SocketAddr> {
        self.web.lock().ok()?.as_ref().map(|w| w.local_addr())
    }

    /// Show `job` on the web endpoint with its guarantee, and remember the guarantee for
    /// `SHOW JOBS`.
    pub(super) fn watch(&self, state: &mut State, job: &JobHandle, report: Option<crate::guarantees::Report>) {
        let (delivered, guarantee) = match &report {
            Some(r) => (r.delivered.clone(), r.lines.clone()),
            None => ("none (to the caller)".to_string(), Vec::new()),
        };
        self.watched.add(job.clone(), delivered, guarantee);
        if let Some(report) = report {
            state.guarantees.insert(job.id(), report);
        }
    }
}
