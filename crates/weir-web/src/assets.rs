//! The dashboard: one page, its script and its style, embedded in the binary at build time
//! (no CDN, no network at run time, no JavaScript toolchain).

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

const FILES: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../assets/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../assets/app.js")),
    ("app.css", "text/css; charset=utf-8", include_str!("../assets/app.css")),
];

pub(crate) fn page(name: &str) -> Response {
    match FILES.iter().find(|(file, _, _)| *file == name) {
        Some((_, kind, body)) => {
            ([(header::CONTENT_TYPE, *kind), (header::CACHE_CONTROL, "no-cache")], *body).into_response()
        }
        None => (StatusCode::NOT_FOUND, format!("Not found: /assets/{name}")).into_response(),
    }
}
