//! What every upstream request to a provider, or through a connection, has in common, prepared
//! once per config instead of once per attempt: the endpoint's URI (the provider's `base_url`
//! and its format's path, parsed), the credential header (`Authorization: Bearer …` or
//! `x-api-key`, marked sensitive), the connection's admission queue key and the value of the
//! header that names it to the client. A base URL or key that cannot be sent is reported when a
//! request needs it, as before: a 500 naming the provider.

use crate::config::{Config, Format};
use crate::edge::auth::{X_API_KEY, X_GOOG_API_KEY};
use http::header::{AUTHORIZATION, HeaderName, HeaderValue};
use http::uri::Uri;

/// Endpoints by provider index, credentials by connection index.
pub struct Endpoints {
    bases: Vec<String>,
    uris: Vec<Result<Uri, String>>,
    credentials: Vec<Result<Option<(HeaderName, HeaderValue)>, String>>,
    queue_keys: Vec<String>,
    selected: Vec<Option<HeaderValue>>,
    hosts: Vec<Option<HeaderValue>>,
}

/// Header naming the connection that served (or last failed) a request.
pub const SELECTED: &str = "x-ferroute-selected-connection-id";
/// The same, as a header name.
pub static SELECTED_HEADER: HeaderName = HeaderName::from_static(SELECTED);

/// The path a format's requests are sent to, below the base URL.
pub fn path(format: Format) -> &'static str {
    match format {
        Format::Openai => "/chat/completions",
        Format::Anthropic => "/messages",
        Format::Responses => "/responses",
        // The model and method follow: `/models/{model}:generateContent`.
        Format::Gemini => "/models",
    }
}

/// The `Host` header for `uri`: its host, and its port unless that is the scheme's default (as
/// the HTTP client writes it when a request has none).
fn host_header(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let default = match uri.scheme_str() {
        Some("https") => Some(443),
        Some("http") => Some(80),
        _ => None,
    };
    let value = match uri.port_u16() {
        Some(port) if Some(port) != default => format!("{host}:{port}"),
        _ => host.to_owned(),
    };
    HeaderValue::try_from(value).ok()
}

/// `s` as a URL path: bytes other than unreserved ones and `/` percent-encoded (a model name
/// is data; one with a space or a `?` still names that model).
fn path_escaped(s: &str) -> std::borrow::Cow<'_, str> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/');
    if s.bytes().all(plain) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

impl Endpoints {
    /// Prepares every provider's and connection's.
    pub fn new(config: &Config) -> Self {
        let bases: Vec<String> = config.providers.iter().map(|p| p.base_url.trim_end_matches('/').to_owned()).collect();
        let uris: Vec<Result<Uri, String>> = config
            .providers
            .iter()
            .zip(&bases)
            .map(|(p, base)| Uri::try_from(format!("{base}{}", path(p.format))).map_err(|e| e.to_string()))
            .collect();
        let credentials = config
            .connections
            .iter()
            .map(|c| {
                let Some(key) = c.api_key.as_deref() else { return Ok(None) };
                let format = config.providers.iter().find(|p| p.id == c.provider).map(|p| p.format);
                let (name, value) = match format {
                    Some(Format::Openai | Format::Responses) => {
                        (AUTHORIZATION, HeaderValue::try_from(format!("Bearer {key}")))
                    }
                    Some(Format::Anthropic) => (X_API_KEY.clone(), HeaderValue::try_from(key)),
                    Some(Format::Gemini) => (X_GOOG_API_KEY.clone(), HeaderValue::try_from(key)),
                    None => return Err(format!("connection {} names no configured provider", c.id)),
                };
                let mut value = value.map_err(|e| format!("the key of connection {} cannot be sent: {e}", c.id))?;
                value.set_sensitive(true);
                Ok(Some((name, value)))
            })
            .collect();
        let hosts = uris.iter().map(|u| u.as_ref().ok().and_then(host_header)).collect();
        Endpoints {
            bases,
            uris,
            credentials,
            // M9: a connection's queue is its provider's and its own.
            queue_keys: config.connections.iter().map(|c| format!("{}:{}", c.provider, c.id)).collect(),
            selected: config.connections.iter().map(|c| HeaderValue::try_from(c.id.as_str()).ok()).collect(),
            hosts,
        }
    }

    /// Connection `connection`'s admission queue (M9): `provider:connection`.
    pub fn queue_key(&self, connection: usize) -> &str {
        &self.queue_keys[connection]
    }

    /// The `Host` header of provider `provider`'s requests, made once (the client would
    /// otherwise format it for every request).
    pub fn host(&self, provider: usize) -> Option<&HeaderValue> {
        self.hosts[provider].as_ref()
    }

    /// Connection `connection`'s id as a header value (`None` if it cannot be one).
    pub fn selected(&self, connection: usize) -> Option<&HeaderValue> {
        self.selected[connection].as_ref()
    }

    /// The URI of provider `provider`'s endpoint, with the client's query string if it is kept.
    /// A Gemini provider's names the model and whether it streams.
    pub fn uri(
        &self,
        provider: usize,
        format: Format,
        query: Option<&str>,
        model: &str,
        stream: bool,
    ) -> Result<Uri, String> {
        if format == Format::Gemini {
            let method = if stream { "streamGenerateContent?alt=sse" } else { "generateContent" };
            return self.gemini_uri(provider, model, method);
        }
        match query {
            None => self.uris[provider].clone(),
            Some(q) => {
                Uri::try_from(format!("{}{}?{q}", self.bases[provider], path(format))).map_err(|e| e.to_string())
            }
        }
    }

    /// A Gemini provider's `countTokens` endpoint for `model`.
    pub fn count_tokens_uri(&self, provider: usize, model: &str) -> Result<Uri, String> {
        self.gemini_uri(provider, model, "countTokens")
    }

    /// A Gemini provider's `{base}/models/{model}:{method}`.
    fn gemini_uri(&self, provider: usize, model: &str, method: &str) -> Result<Uri, String> {
        Uri::try_from(format!("{}/models/{}:{method}", self.bases[provider], path_escaped(model)))
            .map_err(|e| format!("model {model:?} cannot be put in a URL: {e}"))
    }

    /// Connection `connection`'s credential header, if it has a key.
    pub fn credential(&self, connection: usize) -> Result<Option<&(HeaderName, HeaderValue)>, &str> {
        match &self.credentials[connection] {
            Ok(c) => Ok(c.as_ref()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gemini_model_is_escaped_into_its_url() {
        assert_eq!(path_escaped("gemini-2.5-flash"), "gemini-2.5-flash");
        assert_eq!(path_escaped("tuned/a b?x"), "tuned/a%20b%3Fx");
        let config = config(
            "[[providers]]\nid = \"gem\"\nformat = \"gemini\"\nbase_url = \"http://127.0.0.1:9/v1beta\"\n[[connections]]\nid = \"k\"\nprovider = \"gem\"\napi_key = \"k\"\n",
        );
        let e = Endpoints::new(&config);
        let uri = e.uri(0, Format::Gemini, Some("key=secret"), "a b", true).expect("uri");
        assert_eq!(uri, "http://127.0.0.1:9/v1beta/models/a%20b:streamGenerateContent?alt=sse");
    }

    #[test]
    fn the_host_header_names_a_port_only_when_it_is_not_the_default() {
        let host =
            |u: &str| host_header(&Uri::try_from(u).expect("uri")).map(|v| v.to_str().expect("ascii").to_owned());
        assert_eq!(host("http://127.0.0.1:9/v1/chat/completions").as_deref(), Some("127.0.0.1:9"));
        assert_eq!(host("https://api.openai.com/v1/chat/completions").as_deref(), Some("api.openai.com"));
        assert_eq!(host("https://api.example:443/v1").as_deref(), Some("api.example"));
        assert_eq!(host("http://up:80/v1").as_deref(), Some("up"));
        assert_eq!(host("http://up:8443/v1").as_deref(), Some("up:8443"));
        assert_eq!(host("https://user:pw@up.example/v1").as_deref(), Some("up.example"));
    }

    fn config(text: &str) -> Config {
        Config::from_toml_str(text, &|_| None, &[]).expect("config")
    }

    #[test]
    fn each_format_gets_its_path_and_credential_header() {
        let config = config(
            r#"
            [[providers]]
            id = "oa"
            format = "openai"
            base_url = "http://127.0.0.1:9/v1/"
            [[providers]]
            id = "an"
            format = "anthropic"
            base_url = "http://127.0.0.1:9/v1"
            [[connections]]
            id = "k1"
            provider = "oa"
            api_key = "sk-1"
            [[connections]]
            id = "k2"
            provider = "an"
            api_key = "sk-2"
            [[providers]]
            id = "ollama"
            format = "openai"
            class = "local"
            base_url = "http://127.0.0.1:11434/v1"
            [[connections]]
            id = "local"
            provider = "ollama"
            "#,
        );
        let e = Endpoints::new(&config);
        assert_eq!(e.uri(0, Format::Openai, None, "m", false).expect("uri"), "http://127.0.0.1:9/v1/chat/completions");
        assert_eq!(
            e.uri(1, Format::Anthropic, Some("beta=true"), "m", false).expect("uri"),
            "http://127.0.0.1:9/v1/messages?beta=true"
        );
        let (name, value) = e.credential(0).expect("valid").expect("a key");
        assert_eq!((name.as_str(), value.to_str().ok()), ("authorization", Some("Bearer sk-1")));
        assert!(value.is_sensitive());
        let (name, value) = e.credential(1).expect("valid").expect("a key");
        assert_eq!((name.as_str(), value.to_str().ok()), ("x-api-key", Some("sk-2")));
        assert!(e.credential(2).expect("valid").is_none());
        assert_eq!((e.queue_key(1), e.queue_key(2)), ("an:k2", "ollama:local"));
        assert_eq!(e.selected(2).and_then(|v| v.to_str().ok()), Some("local"));
    }

    #[test]
    fn a_key_that_cannot_be_a_header_is_reported_when_used() {
        let config = config(
            "[[providers]]\nid = \"oa\"\nformat = \"openai\"\nbase_url = \"http://127.0.0.1:9\"\n\
             [[connections]]\nid = \"k1\"\nprovider = \"oa\"\napi_key = \"sk-1\\nInjected: yes\"\n",
        );
        let e = Endpoints::new(&config);
        let err = e.credential(0).expect_err("a newline cannot be sent");
        assert!(err.contains("connection k1"), "{err}");
    }
}
