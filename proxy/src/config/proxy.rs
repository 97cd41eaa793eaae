//! A connection's or provider's `proxy` setting, parsed: how its upstream requests leave
//! (the connector that acts on it is [`crate::state::outbound`]).

use http::{HeaderValue, Uri};
use hyper_util::client::proxy::matcher::Matcher;
use std::sync::Arc;

/// Where a connection's requests go first.
#[derive(Clone)]
pub enum Via {
    /// Straight to the upstream.
    Direct,
    /// Through an HTTP proxy's `CONNECT` tunnel.
    Http {
        /// The proxy (`http://host:port`).
        proxy: Uri,
        /// `Proxy-Authorization`, from the URL's user and password.
        auth: Option<HeaderValue>,
        /// As the operator wrote it, the password masked.
        shown: String,
    },
    /// Through a SOCKS5 proxy.
    Socks {
        /// The proxy (`socks5://host:port`).
        proxy: Uri,
        /// The user and password, if any.
        auth: Option<(String, String)>,
        /// `socks5h`: the proxy resolves the upstream's name.
        remote_dns: bool,
        /// As the operator wrote it, the password masked.
        shown: String,
    },
    /// As the environment's proxy variables say, per upstream.
    Env(Arc<Matcher>),
}

impl std::fmt::Debug for Via {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

impl Via {
    /// Reads a `proxy` setting: `none`, `http://[user:pass@]host:port`, `socks5://…` or
    /// `socks5h://…`.
    pub fn parse(value: &str) -> Result<Via, String> {
        let value = value.trim();
        if value.eq_ignore_ascii_case("none") {
            return Ok(Via::Direct);
        }
        let uri: Uri = value.parse().map_err(|e| format!("{:?} is not a proxy URL: {e}", mask(value)))?;
        let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
            return Err(format!("{:?} is not a proxy URL (scheme://host:port)", mask(value)));
        };
        let (user, host) = match authority.as_str().rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority.as_str()),
        };
        let credentials = user.map(|u| {
            let (name, pass) = u.split_once(':').unwrap_or((u, ""));
            (percent_decode(name), percent_decode(pass))
        });
        let shown = mask(value);
        let bare = |s: &str| format!("{s}://{host}").parse::<Uri>().map_err(|e| format!("{shown:?}: {e}"));
        match scheme {
            "http" => {
                let auth = credentials.map(|(n, p)| basic(&n, &p)).transpose()?;
                Ok(Via::Http { proxy: bare("http")?, auth, shown })
            }
            "socks5" | "socks5h" => {
                Ok(Via::Socks { proxy: bare(scheme)?, auth: credentials, remote_dns: scheme == "socks5h", shown })
            }
            "https" => Err(format!(
                "{shown:?}: a proxy reached over TLS (https://) is not supported; use http:// or socks5://"
            )),
            other => Err(format!("{shown:?}: unknown proxy scheme {other:?} (http, socks5, socks5h, or none)")),
        }
    }

    /// The proxy variables read through `get` (upper case first, then lower case, as curl).
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Via {
        let pick = |name: &str| {
            get(name).or_else(|| get(&name.to_ascii_lowercase())).filter(|v| !v.trim().is_empty()).unwrap_or_default()
        };
        let m = Matcher::builder()
            .all(pick("ALL_PROXY"))
            .http(pick("HTTP_PROXY"))
            .https(pick("HTTPS_PROXY"))
            .no(pick("NO_PROXY"))
            .build();
        Via::Env(Arc::new(m))
    }

    /// How health shows it (never a password).
    pub fn shown(&self) -> String {
        match self {
            Via::Direct => "none".into(),
            Via::Http { shown, .. } | Via::Socks { shown, .. } => shown.clone(),
            Via::Env(_) => "from the environment".into(),
        }
    }

    /// The same key for the same way out (connections that share it share a client's pool).
    pub fn key(&self) -> String {
        match self {
            Via::Env(_) => "env".into(),
            other => other.shown(),
        }
    }
}

fn basic(name: &str, pass: &str) -> Result<HeaderValue, String> {
    use base64::Engine as _;
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{pass}"));
    let mut v = HeaderValue::try_from(format!("Basic {token}")).map_err(|e| e.to_string())?;
    v.set_sensitive(true);
    Ok(v)
}

/// `%XX` escapes of a URL's user or password, decoded.
fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// A proxy URL with its password replaced by `***`.
pub fn mask(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    match rest.split_once('@') {
        Some((user, host)) => {
            let name = user.split_once(':').map_or(user, |(n, _)| n);
            format!("{scheme}://{name}:***@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_settings_parse_and_never_show_a_password() {
        let Ok(Via::Http { proxy, auth, shown }) = Via::parse("http://team:s%40cret@proxy.corp:3128") else {
            panic!("an http proxy")
        };
        assert_eq!(
            (proxy.to_string().as_str(), shown.as_str()),
            ("http://proxy.corp:3128/", "http://team:***@proxy.corp:3128")
        );
        // base64("team:s@cret")
        assert_eq!(auth.and_then(|a| a.to_str().ok().map(str::to_owned)).as_deref(), Some("Basic dGVhbTpzQGNyZXQ="));
        let Ok(Via::Socks { auth, remote_dns, .. }) = Via::parse("socks5h://u:p@127.0.0.1:1080") else {
            panic!("socks")
        };
        assert_eq!((auth, remote_dns), (Some(("u".into(), "p".into())), true));
        assert!(matches!(Via::parse("none"), Ok(Via::Direct)));
        assert!(Via::parse("https://p:1").expect_err("tls proxy").contains("not supported"));
        assert!(Via::parse("ftp://p:1").expect_err("scheme").contains("unknown proxy scheme"));
        assert!(!Via::parse("ftp://u:hunter2@p:1").expect_err("scheme").contains("hunter2"));
    }
}
