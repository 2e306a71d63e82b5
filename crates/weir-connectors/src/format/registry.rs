//! A client of a Confluent-compatible schema registry's REST API, the few calls the
//! `avro-confluent` format makes: a writer schema by id (reading), registering the table's
//! schema under its subject (writing), or finding it there when registration is off.

use std::time::Duration;

use serde_json::{json, Value as Json};
use weir_core::{Result, TableDef, WeirError};

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct Registry {
    url: String,
    /// `user:password` (`basic-auth.user-info`).
    user_info: Option<String>,
    /// `bearer-auth.token`.
    token: Option<String>,
    client: reqwest::Client,
}

impl std::fmt::Debug for Registry {
    // Never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "schema registry {}", self.url)
    }
}

impl Registry {
    /// The registry options of a format under `prefix` (`avro-confluent.` or
    /// `value.avro-confluent.`), in Flink's names.
    pub fn from_options(table: &TableDef, prefix: &str) -> Result<Self> {
        let o = &table.options;
        let key = |k: &str| format!("{prefix}{k}");
        let url = o
            .get(&key("url"))
            .or_else(|| o.get(&key("schema-registry.url")))
            .ok_or_else(|| WeirError::user(format!("table '{}' needs the option '{}'", table.name, key("url"))))?
            .trim_end_matches('/')
            .to_string();
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(WeirError::user(format!(
                "table '{}': '{}' = '{url}' is not an http(s) URL",
                table.name,
                key("url")
            ))
            .at(o.location(&key("url"))));
        }
        let user_info = match o.get(&key("basic-auth.credentials-source")).map(str::to_ascii_uppercase).as_deref() {
            None | Some("USER_INFO") => o.get(&key("basic-auth.user-info")).map(str::to_string),
            Some(other) => {
                return Err(WeirError::not_supported(format!(
                    "table '{}': '{}' = '{other}': Weir reads credentials from 'basic-auth.user-info' (USER_INFO) only",
                    table.name,
                    key("basic-auth.credentials-source")
                ))
                .at(o.location(&key("basic-auth.credentials-source"))))
            }
        };
        let token = match o.get(&key("bearer-auth.credentials-source")).map(str::to_ascii_uppercase).as_deref() {
            None | Some("STATIC_TOKEN") => o.get(&key("bearer-auth.token")).map(str::to_string),
            Some(other) => {
                return Err(WeirError::not_supported(format!(
                    "table '{}': '{}' = '{other}': Weir reads a bearer token from 'bearer-auth.token' (STATIC_TOKEN) \
                     only",
                    table.name,
                    key("bearer-auth.credentials-source")
                ))
                .at(o.location(&key("bearer-auth.credentials-source"))))
            }
        };
        if user_info.is_some() && token.is_some() {
            return Err(WeirError::user(format!(
                "table '{}': give one of '{}' and '{}', not both",
                table.name,
                key("basic-auth.user-info"),
                key("bearer-auth.token")
            ))
            .at(o.location(&key("bearer-auth.token"))));
        }
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| WeirError::internal(format!("an HTTP client for the schema registry: {e}")))?;
        Ok(Self { url, user_info, token, client })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, format!("{}{path}", self.url));
        match (&self.user_info, &self.token) {
            (Some(info), _) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                r.basic_auth(user, Some(password))
            }
            (None, Some(token)) => r.bearer_auth(token),
            (None, None) => r,
        }
    }

    /// The response's JSON; `Ok(None)` on 404 (with the registry's error code).
    async fn send(&self, r: reqwest::RequestBuilder, what: &str) -> Result<std::result::Result<Json, i64>> {
        let unreachable = |e: reqwest::Error| {
            WeirError::external(format!("the schema registry at {} cannot be reached ({what}): {e}", self.url))
        };
        let response = r.send().await.map_err(unreachable)?;
        let status = response.status();
        let body = response.bytes().await.map_err(unreachable)?;
        let json: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
        if status.as_u16() == 404 {
            return Ok(Err(json.get("error_code").and_then(Json::as_i64).unwrap_or(404)));
        }
        if !status.is_success() {
            let message = json.get("message").and_then(Json::as_str).unwrap_or("").to_string();
            return Err(WeirError::external(format!(
                "the schema registry at {} refused to {what}: HTTP {status} {message}",
                self.url
            )));
        }
        Ok(Ok(json))
    }

    /// A writer schema by its id; `None` if the registry has none of that id.
    pub async fn schema(&self, id: u32) -> Result<Option<String>> {
        let r = self.request(reqwest::Method::GET, &format!("/schemas/ids/{id}"));
        match self.send(r, &format!("give schema id {id}")).await? {
            Ok(j) => Ok(j.get("schema").and_then(Json::as_str).map(str::to_string)),
            Err(_) => Ok(None),
        }
    }

    /// Register `schema` under `subject` (or find it there, if `register` is off): its id.
    pub async fn id_for(&self, subject: &str, schema: &str, register: bool) -> Result<u32> {
        let body = json!({ "schema": schema }).to_string();
        let path = match register {
            true => format!("/subjects/{subject}/versions"),
            false => format!("/subjects/{subject}"),
        };
        let r = self
            .request(reqwest::Method::POST, &path)
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .body(body);
        let what = if register { "register the table's schema" } else { "look up the table's schema" };
        match self.send(r, &format!("{what} under subject '{subject}'")).await? {
            Ok(j) => j.get("id").and_then(Json::as_u64).map(|id| id as u32).ok_or_else(|| {
                WeirError::external(format!("the schema registry at {} answered without an id", self.url))
            }),
            Err(40401) => Err(WeirError::user(format!(
                "the schema registry at {} has no subject '{subject}' (schemas are not registered: \
                 'auto.register.schemas' is off)",
                self.url
            ))),
            Err(_) => Err(WeirError::user(format!(
                "the schema registry at {} has no schema under subject '{subject}' like the table's (schemas are \
                 not registered: 'auto.register.schemas' is off)",
                self.url
            ))),
        }
    }
}
