//! A client of an Iceberg REST catalog (the REST catalog spec's `/v1` API), the calls a
//! writer makes: the catalog's configuration, OAuth2 client credentials, loading a table,
//! creating its namespace and the table, and committing a snapshot.
//!
//! A REST catalog writes the metadata files itself: a commit sends the new snapshot as
//! updates (`add-snapshot`, `set-snapshot-ref`) under requirements the catalog checks
//! atomically (`assert-table-uuid`, `assert-ref-snapshot-id` on `main`), which is the
//! compare-and-swap; a failed requirement answers 409 and the sink reloads and retries.
//! A 5xx answer to a commit leaves its outcome unknown: the job fails, and its restart
//! reads the table's snapshots, which record the checkpoints already committed.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{json, Value as Json};
use tokio::sync::Mutex;
use weir_core::{Result, TableDef, WeirError};

use super::catalog::{Catalog, Loaded};

const TIMEOUT: Duration = Duration::from_secs(30);

pub struct RestCatalog {
    uri: String,
    warehouse: Option<String>,
    namespace: Vec<String>,
    table: String,
    auth: Auth,
    client: reqwest::Client,
    /// The path prefix the catalog's configuration gives, and the bearer token in use.
    session: Mutex<Option<Session>>,
}

enum Auth {
    None,
    Token(String),
    /// `client_id:client_secret`, exchanged at the token endpoint for a bearer token.
    Credential {
        credential: String,
        server: String,
        scope: String,
    },
}

#[derive(Clone)]
struct Session {
    prefix: String,
    token: Option<String>,
}

/// An answer: its status and JSON body (null if it had none).
struct Answer {
    status: u16,
    body: Json,
}

impl RestCatalog {
    pub fn new(def: &TableDef, warehouse: Option<&str>, database: &str, table: &str) -> Result<Self> {
        let o = &def.options;
        let uri = o.required(&def.name, "uri")?.trim_end_matches('/').to_string();
        if !uri.starts_with("http://") && !uri.starts_with("https://") {
            return Err(WeirError::user(format!("table '{}': 'uri' = '{uri}' is not an http(s) URL", def.name))
                .at(o.location("uri")));
        }
        let auth = match (o.get("token"), o.get("credential")) {
            (Some(_), Some(_)) => {
                return Err(WeirError::user(format!(
                    "table '{}': give one of 'token' and 'credential', not both",
                    def.name
                ))
                .at(o.location("credential")))
            }
            (Some(t), None) => Auth::Token(t.to_string()),
            (None, Some(c)) => Auth::Credential {
                credential: c.to_string(),
                server: o.get("oauth2-server-uri").map_or_else(|| format!("{uri}/v1/oauth/tokens"), str::to_string),
                scope: o.get("scope").unwrap_or("catalog").to_string(),
            },
            (None, None) => Auth::None,
        };
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| WeirError::internal(format!("an HTTP client for the Iceberg REST catalog: {e}")))?;
        Ok(Self {
            uri,
            warehouse: warehouse.map(str::to_string),
            namespace: database.split('.').map(str::to_string).collect(),
            table: table.to_string(),
            auth,
            client,
            session: Mutex::new(None),
        })
    }

    fn unreachable(&self, what: &str, e: reqwest::Error) -> WeirError {
        WeirError::external(format!("Iceberg: the rest catalog at {} cannot be reached ({what}): {e}", self.uri))
    }

    fn refused(&self, what: &str, a: &Answer) -> WeirError {
        WeirError::external(self.refusal(what, a))
    }

    fn refusal(&self, what: &str, a: &Answer) -> String {
        let error = a.body.get("error");
        let kind = error.and_then(|e| e.get("type")).and_then(Json::as_str).unwrap_or("");
        let message = error
            .and_then(|e| e.get("message"))
            .or_else(|| a.body.get("error_description"))
            .and_then(Json::as_str)
            .unwrap_or("");
        format!("Iceberg: the rest catalog at {} refused to {what}: HTTP {} {kind} {message}", self.uri, a.status)
    }

    async fn send(&self, r: reqwest::RequestBuilder, what: &str) -> Result<Answer> {
        let response = r.send().await.map_err(|e| self.unreachable(what, e))?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|e| self.unreachable(what, e))?;
        Ok(Answer { status, body: serde_json::from_slice(&bytes).unwrap_or(Json::Null) })
    }

    /// The catalog's configuration and a token, once per sink.
    async fn session(&self) -> Result<Session> {
        let mut guard = self.session.lock().await;
        if let Some(s) = guard.as_ref() {
            return Ok(s.clone());
        }
        let token = match &self.auth {
            Auth::None => None,
            Auth::Token(t) => Some(t.clone()),
            Auth::Credential { credential, server, scope } => {
                let (id, secret) = credential.split_once(':').unwrap_or(("", credential.as_str()));
                let form = [
                    ("grant_type", "client_credentials"),
                    ("client_id", id),
                    ("client_secret", secret),
                    ("scope", scope),
                ];
                let what = "give a token for 'credential'";
                let a = self.send(self.client.post(server).form(&form), what).await?;
                if a.status != 200 {
                    return Err(self.refused(what, &a));
                }
                let token = a.body.get("access_token").and_then(Json::as_str).ok_or_else(|| {
                    WeirError::external(format!(
                        "Iceberg: the rest catalog's token endpoint {server} gave no access_token"
                    ))
                })?;
                Some(token.to_string())
            }
        };
        let mut config = self.client.get(format!("{}/v1/config", self.uri));
        if let Some(w) = &self.warehouse {
            config = config.query(&[("warehouse", w)]);
        }
        if let Some(t) = &token {
            config = config.bearer_auth(t);
        }
        let what = "give its configuration";
        let a = self.send(config, what).await?;
        if a.status != 200 {
            return Err(self.refused(what, &a));
        }
        // Overrides win over defaults; a catalog without a prefix serves `/v1/namespaces/…`.
        let prefix = ["overrides", "defaults"]
            .iter()
            .find_map(|k| a.body.get(*k)?.get("prefix")?.as_str())
            .map(|p| format!("/{}", encode(p)))
            .unwrap_or_default();
        let session = Session { prefix, token };
        *guard = Some(session.clone());
        Ok(session)
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<&Json>, what: &str) -> Result<Answer> {
        let s = self.session().await?;
        let mut r = self.client.request(method, format!("{}/v1{}{path}", self.uri, s.prefix));
        if let Some(t) = &s.token {
            r = r.bearer_auth(t);
        }
        if let Some(b) = body {
            r = r.header("Content-Type", "application/json").body(b.to_string());
        }
        self.send(r, what).await
    }

    fn namespace_path(&self) -> String {
        // Levels of a namespace are joined by the unit separator (the spec's encoding).
        format!("/namespaces/{}", encode(&self.namespace.join("\u{1f}")))
    }

    fn table_path(&self) -> String {
        format!("{}/tables/{}", self.namespace_path(), encode(&self.table))
    }

    fn loaded(&self, what: &str, a: &Answer) -> Result<Loaded> {
        let location = a.body.get("metadata-location").and_then(Json::as_str);
        match (location, a.body.get("metadata")) {
            (Some(location), Some(metadata)) => {
                Ok(Loaded { location: location.to_string(), metadata: metadata.clone() })
            }
            _ => Err(WeirError::external(format!(
                "Iceberg: the rest catalog at {} answered '{what}' without 'metadata-location' and 'metadata'",
                self.uri
            ))),
        }
    }

    /// Create the table from `metadata`'s schema, spec and properties; the catalog chooses
    /// its location. `false`: it exists already.
    async fn create(&self, metadata: &Json) -> Result<bool> {
        let body = json!({
            "name": self.table,
            "schema": metadata["schemas"][0],
            "partition-spec": metadata["partition-specs"][0],
            "write-order": {"order-id": 0, "fields": []},
            "stage-create": false,
            "properties": metadata["properties"],
        });
        let what = "create the table";
        let mut a =
            self.call(reqwest::Method::POST, &format!("{}/tables", self.namespace_path()), Some(&body), what).await?;
        if a.status == 404 {
            // No namespace yet: create it (another writer may have meanwhile), then the table.
            let ns = json!({"namespace": self.namespace, "properties": {}});
            let n = self.call(reqwest::Method::POST, "/namespaces", Some(&ns), "create the namespace").await?;
            if n.status != 200 && n.status != 409 {
                return Err(self.refused("create the namespace", &n));
            }
            a = self
                .call(reqwest::Method::POST, &format!("{}/tables", self.namespace_path()), Some(&body), what)
                .await?;
        }
        match a.status {
            200 => Ok(true),
            409 => Ok(false),
            _ => Err(self.refused(what, &a)),
        }
    }
}

#[async_trait]
impl Catalog for RestCatalog {
    fn describe(&self) -> String {
        format!("the rest catalog at {}, table {}.{}", self.uri, self.namespace.join("."), self.table)
    }

    fn default_location(&self) -> String {
        // The catalog chooses a new table's location.
        String::new()
    }

    async fn load(&self) -> Result<Option<Loaded>> {
        let what = "load the table";
        let a = self.call(reqwest::Method::GET, &self.table_path(), None, what).await?;
        match a.status {
            200 => self.loaded(what, &a).map(Some),
            404 => Ok(None),
            _ => Err(self.refused(what, &a)),
        }
    }

    async fn commit(&self, previous: Option<&str>, metadata: &Json) -> Result<Option<String>> {
        if previous.is_none() {
            // Created: its location is the catalog's; the sink loads it.
            return Ok(self.create(metadata).await?.then(String::new));
        }
        let id = metadata.get("current-snapshot-id").and_then(Json::as_i64);
        let snapshot = super::metadata::current_snapshot(metadata)
            .ok_or_else(|| WeirError::internal("an Iceberg commit without a current snapshot"))?;
        let parent = snapshot.get("parent-snapshot-id").cloned().unwrap_or(Json::Null);
        let body = json!({
            "requirements": [
                {"type": "assert-table-uuid", "uuid": metadata["table-uuid"]},
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent},
            ],
            "updates": [
                {"action": "add-snapshot", "snapshot": snapshot},
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": id},
            ],
        });
        let what = "commit a snapshot";
        let a = self.call(reqwest::Method::POST, &self.table_path(), Some(&body), what).await?;
        match a.status {
            200 => Ok(Some(self.loaded(what, &a)?.location)),
            409 => Ok(None),
            500..=599 => Err(WeirError::external(format!(
                "{} (whether the snapshot was committed is unknown: the restart reads the table's snapshots)",
                self.refusal(what, &a)
            ))),
            _ => Err(self.refused(what, &a)),
        }
    }
}

/// A path segment, percent-encoded (all but RFC 3986's unreserved characters).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
