//! The settings an object store takes, in Flink's names where Flink has them (its S3 file
//! systems' `s3.access-key`, `s3.secret-key`, `s3.endpoint`, `s3.path.style.access`), and
//! how they become `object_store`'s configuration. A store reads the usual environment
//! variables first (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT`, `GOOGLE_SERVICE_ACCOUNT`,
//! `AZURE_STORAGE_ACCOUNT_NAME`…); a setting given overrides them.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ObjectStore;

/// Setting, `object_store`'s key, whether its value is secret, what it is.
pub const SETTINGS: &[(&str, &str, bool, &str)] = &[
    ("s3.access-key", "aws_access_key_id", false, "S3: the access key id (default: AWS_ACCESS_KEY_ID)"),
    ("s3.secret-key", "aws_secret_access_key", true, "S3: the secret access key (default: AWS_SECRET_ACCESS_KEY)"),
    ("s3.session-token", "aws_session_token", true, "S3: a session token (default: AWS_SESSION_TOKEN)"),
    ("s3.region", "aws_region", false, "S3: the region (default: AWS_REGION, else us-east-1)"),
    (
        "s3.endpoint",
        "aws_endpoint",
        false,
        "S3: the endpoint of an S3-compatible store, e.g. 'http://127.0.0.1:9000' (default: AWS's)",
    ),
    (
        "s3.path.style.access",
        "aws_virtual_hosted_style_request",
        false,
        "S3: 'true' addresses buckets by path (endpoint/bucket/key), as most S3-compatible stores need",
    ),
    ("gs.service-account", "google_service_account", false, "GCS: the service account's key file"),
    ("azure.account-name", "azure_storage_account_name", false, "Azure Blob: the storage account"),
    ("azure.account-key", "azure_storage_account_key", true, "Azure Blob: the account's access key"),
    ("azure.sas-token", "azure_storage_sas_key", true, "Azure Blob: a shared access signature"),
    (
        "azure.endpoint",
        "azure_storage_endpoint",
        false,
        "Azure Blob: the account's endpoint, for an emulator or another cloud, e.g. \
         'http://127.0.0.1:10000/devstoreaccount1' (default: https://<account>.blob.core.windows.net)",
    ),
];

/// Whether a setting's value is secret: never shown in listings, logs or errors.
pub fn is_secret(key: &str) -> bool {
    SETTINGS.iter().any(|(k, _, secret, _)| *k == key && *secret)
}

/// What a store of one scheme is configured with.
pub(crate) struct Configured {
    pub pairs: Vec<(String, String)>,
    /// Values to keep out of messages.
    pub secrets: Vec<String>,
    pub allow_http: bool,
}

/// The settings that apply to `scheme`'s stores, as `object_store` keys.
pub(crate) fn object_store_config(
    scheme: &str,
    settings: &BTreeMap<String, String>,
) -> std::result::Result<Configured, String> {
    let family = family(scheme)?;
    let mut c = Configured { pairs: Vec::new(), secrets: Vec::new(), allow_http: false };
    for (key, store_key, secret, _) in SETTINGS {
        let Some(value) = settings.get(*key) else { continue };
        if !key.starts_with(family) {
            continue;
        }
        let value = match *key {
            "s3.path.style.access" => match value.to_ascii_lowercase().as_str() {
                "true" => "false".to_string(),
                "false" => "true".to_string(),
                _ => return Err(format!("'{key}' must be 'true' or 'false', not '{value}'")),
            },
            "s3.endpoint" | "azure.endpoint" => {
                c.allow_http = value.starts_with("http://");
                value.clone()
            }
            _ => value.clone(),
        };
        if *secret {
            c.secrets.push(value.clone());
        }
        c.pairs.push((store_key.to_string(), value));
    }
    // A secret that came from the environment stays out of messages as well.
    for var in ["AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_SAS_KEY"] {
        if let Ok(v) = std::env::var(var) {
            c.secrets.push(v);
        }
    }
    if family == "s3."
        && std::env::var("AWS_ENDPOINT")
            .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
            .is_ok_and(|e| e.starts_with("http://"))
    {
        c.allow_http = true;
    }
    Ok(c)
}

/// The settings' prefix of a scheme's stores.
pub(crate) fn family(scheme: &str) -> std::result::Result<&'static str, String> {
    match scheme {
        "s3" | "s3a" => Ok("s3."),
        "gs" => Ok("gs."),
        "az" | "abfs" | "abfss" | "azure" => Ok("azure."),
        other => Err(format!(
            "'{other}://' is not a checkpoint storage Weir knows: use a local directory, file://, s3:// (or s3a://), \
             gs:// or az://"
        )),
    }
}

fn bad(e: impl std::fmt::Display) -> String {
    e.to_string().replace('\n', " ")
}

/// The store for `url` (`scheme://bucket`).
pub(crate) fn build(scheme: &str, url: &str, c: &Configured) -> std::result::Result<Arc<dyn ObjectStore>, String> {
    let (client, retry) = crate::objects::client_limits();
    let client = client.with_allow_http(c.allow_http);
    match family(scheme)? {
        "s3." => {
            let mut b = object_store::aws::AmazonS3Builder::from_env().with_url(url);
            b = b.with_client_options(client).with_retry(retry);
            for (k, v) in &c.pairs {
                b = b.with_config(k.parse().map_err(bad)?, v);
            }
            Ok(Arc::new(b.build().map_err(bad)?))
        }
        "gs." => {
            let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url);
            b = b.with_client_options(client).with_retry(retry);
            for (k, v) in &c.pairs {
                b = b.with_config(k.parse().map_err(bad)?, v);
            }
            Ok(Arc::new(b.build().map_err(bad)?))
        }
        _ => {
            let mut b = object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url);
            b = b.with_client_options(client).with_retry(retry);
            for (k, v) in &c.pairs {
                b = b.with_config(k.parse().map_err(bad)?, v);
            }
            Ok(Arc::new(b.build().map_err(bad)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flinks_s3_settings_become_object_store_keys_and_secrets_are_known() {
        let settings: BTreeMap<String, String> = [
            ("s3.access-key", "AKID"),
            ("s3.secret-key", "s3cr3t"),
            ("s3.endpoint", "http://127.0.0.1:9000"),
            ("s3.path.style.access", "true"),
            ("azure.account-key", "not for s3"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = object_store_config("s3", &settings).expect("s3 settings");
        assert!(c.allow_http);
        assert!(c.secrets.contains(&"s3cr3t".to_string()));
        assert!(c.pairs.contains(&("aws_virtual_hosted_style_request".into(), "false".into())));
        assert!(!c.pairs.iter().any(|(k, _)| k.starts_with("azure")));
        assert!(is_secret("s3.secret-key") && !is_secret("s3.endpoint"));
        let err = object_store_config("ftp", &settings).err().expect("unknown scheme");
        assert!(err.contains("'ftp://'"), "{err}");
    }
}
