//! Google's Generative Language API as Ferroute serves it: which call a path names
//! (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`, `:countTokens`, the
//! model list; also under `/v1/`, where Google's `google-genai` SDK calls). The model list and
//! `countTokens` are answered in [`crate::ops::google`].

use http::Method;

/// A call of the Gemini API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `POST …/models/{model}:generateContent` or `:streamGenerateContent`.
    Generate {
        /// The model, `provider/model`, a combo or a bare model.
        model: String,
        /// `streamGenerateContent`.
        stream: bool,
    },
    /// `POST …/models/{model}:countTokens`.
    CountTokens {
        /// The model.
        model: String,
    },
    /// `GET …/models`.
    List,
    /// `GET …/models/{model}`.
    Get {
        /// The model.
        model: String,
    },
    /// A path under `…/models/` naming a method Ferroute does not serve.
    Unknown {
        /// The method named.
        method: String,
    },
}

/// `%XX` sequences decoded (a model's `/` may arrive as `%2F`); anything malformed is kept.
pub fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

/// The Gemini call `path` names with `method`, if it is under `/v1beta/models` or (for POST,
/// or a client that says it speaks Gemini) `/v1/models`.
pub fn call(path: &str, method: &Method, google_client: bool) -> Option<Call> {
    let rest = match path.strip_prefix("/v1beta/models") {
        Some(r) => r,
        None => path.strip_prefix("/v1/models").filter(|r| !r.is_empty() || google_client)?,
    };
    if rest.is_empty() || rest == "/" {
        return (method == Method::GET).then_some(Call::List);
    }
    let rest = percent_decoded(rest.strip_prefix('/')?);
    let rest = rest.strip_prefix("models/").unwrap_or(&rest);
    match rest.rsplit_once(':') {
        Some((model, verb)) if method == Method::POST && !model.is_empty() => Some(match verb {
            "generateContent" => Call::Generate { model: model.to_owned(), stream: false },
            "streamGenerateContent" => Call::Generate { model: model.to_owned(), stream: true },
            "countTokens" => Call::CountTokens { model: model.to_owned() },
            other => Call::Unknown { method: other.to_owned() },
        }),
        None if method == Method::GET => Some(Call::Get { model: rest.to_owned() }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_call_with_models_that_contain_slashes() {
        let post = Method::POST;
        assert_eq!(
            call("/v1beta/models/gemini-2.5-flash:generateContent", &post, false),
            Some(Call::Generate { model: "gemini-2.5-flash".into(), stream: false })
        );
        assert_eq!(
            call("/v1/models/bench/m:streamGenerateContent", &post, false),
            Some(Call::Generate { model: "bench/m".into(), stream: true })
        );
        assert_eq!(
            call("/v1beta/models/google%2Fgemini:countTokens", &post, false),
            Some(Call::CountTokens { model: "google/gemini".into() })
        );
        assert_eq!(call("/v1beta/models", &Method::GET, false), Some(Call::List));
        assert_eq!(call("/v1/models", &Method::GET, false), None, "the OpenAI list unless the client is Google's");
        assert_eq!(call("/v1/models", &Method::GET, true), Some(Call::List));
        assert_eq!(call("/v1beta/models/a/b", &Method::GET, false), Some(Call::Get { model: "a/b".into() }));
        assert_eq!(
            call("/v1beta/models/m:embedContent", &post, false),
            Some(Call::Unknown { method: "embedContent".into() })
        );
        assert_eq!(call("/v1/chat/completions", &post, false), None);
    }

    #[test]
    fn percent_sequences_decode_and_malformed_ones_stay() {
        assert_eq!(percent_decoded("a%2Fb"), "a/b");
        assert_eq!(percent_decoded("a%2"), "a%2");
        assert_eq!(percent_decoded("a%zzb"), "a%zzb");
    }
}
