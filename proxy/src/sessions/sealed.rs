//! Secrets at rest: OAuth tokens are sealed with AES-256-GCM under `[server] secret_key` (32
//! bytes in base64), a fresh random nonce per write, and the row's name as associated data so
//! that a sealed value cannot be moved to another row. Without a key they are kept as they are
//! (the gateway warns at start).

use aes_gcm::aead::{Aead, Generate, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;

/// The nonce's length (96 bits).
const NONCE_LEN: usize = 12;

/// Seals and opens secrets at rest.
#[derive(Clone)]
pub struct Sealer {
    cipher: Option<Aes256Gcm>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealer").field("encrypts", &self.cipher.is_some()).finish()
    }
}

/// Why a secret could not be sealed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The key is not 32 bytes in base64.
    #[error("server.secret_key must be 32 bytes in base64 (for example `openssl rand -base64 32`): {0}")]
    Key(String),
    /// The value was sealed, and no key is configured.
    #[error("the stored tokens are encrypted and server.secret_key is not set")]
    NoKey,
    /// The value does not open under this key (another key, or altered).
    #[error("the stored tokens do not decrypt under server.secret_key (another key, or altered)")]
    Open,
    /// The system's random number generator failed.
    #[error("no random nonce could be drawn: {0}")]
    Random(String),
}

impl Sealer {
    /// A sealer for `key` (base64 of 32 bytes), or one that keeps values as they are.
    pub fn new(key: Option<&str>) -> Result<Sealer, SealError> {
        let Some(key) = key else { return Ok(Sealer { cipher: None }) };
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(key.trim()).map_err(|e| SealError::Key(e.to_string()))?;
        let cipher =
            Aes256Gcm::new_from_slice(&bytes).map_err(|_| SealError::Key(format!("{} bytes, not 32", bytes.len())))?;
        Ok(Sealer { cipher: Some(cipher) })
    }

    /// Whether values are encrypted.
    pub fn encrypts(&self) -> bool {
        self.cipher.is_some()
    }

    /// Seals `plain` for row `name`: the bytes to store, and whether they are encrypted.
    pub fn seal(&self, name: &str, plain: &[u8]) -> Result<(Vec<u8>, bool), SealError> {
        let Some(cipher) = &self.cipher else { return Ok((plain.to_vec(), false)) };
        let nonce = Nonce::try_generate().map_err(|e| SealError::Random(e.to_string()))?;
        let sealed =
            cipher.encrypt(&nonce, Payload { msg: plain, aad: name.as_bytes() }).map_err(|_| SealError::Open)?;
        let mut out = Vec::with_capacity(NONCE_LEN + sealed.len());
        out.extend_from_slice(nonce.as_slice());
        out.extend_from_slice(&sealed);
        Ok((out, true))
    }

    /// Opens what [`Sealer::seal`] stored for row `name`.
    pub fn open(&self, name: &str, stored: &[u8], encrypted: bool) -> Result<Vec<u8>, SealError> {
        if !encrypted {
            return Ok(stored.to_vec());
        }
        let Some(cipher) = &self.cipher else { return Err(SealError::NoKey) };
        if stored.len() < NONCE_LEN {
            return Err(SealError::Open);
        }
        let (nonce, sealed) = stored.split_at(NONCE_LEN);
        let nonce = Nonce::try_from(nonce).map_err(|_| SealError::Open)?;
        cipher.decrypt(&nonce, Payload { msg: sealed, aad: name.as_bytes() }).map_err(|_| SealError::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    #[test]
    fn a_sealed_token_opens_only_under_its_key_and_its_row() {
        let s = Sealer::new(Some(KEY)).expect("a key");
        let (a, enc) = s.seal("claude-1", b"sk-ant-ort01-secret").expect("sealed");
        let (b, _) = s.seal("claude-1", b"sk-ant-ort01-secret").expect("sealed");
        assert!(enc);
        assert_ne!(a, b, "a fresh nonce per write");
        assert!(!a.windows(6).any(|w| w == b"secret"), "the plain text is not in the sealed bytes");
        assert_eq!(s.open("claude-1", &a, true).expect("opens"), b"sk-ant-ort01-secret");
        assert_eq!(s.open("claude-2", &a, true), Err(SealError::Open), "bound to its row");
        let other = Sealer::new(Some("HyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4=")).expect("a key");
        assert_eq!(other.open("claude-1", &a, true), Err(SealError::Open));
        assert_eq!(Sealer::new(None).expect("none").open("claude-1", &a, true), Err(SealError::NoKey));
        let mut altered = a.clone();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(s.open("claude-1", &altered, true), Err(SealError::Open));
    }

    #[test]
    fn without_a_key_values_are_kept_as_they_are_and_bad_keys_are_named() {
        let s = Sealer::new(None).expect("none");
        assert_eq!(s.seal("x", b"plain").expect("kept"), (b"plain".to_vec(), false));
        assert!(matches!(Sealer::new(Some("not base64!")), Err(SealError::Key(_))));
        assert_eq!(Sealer::new(Some("AAEC")).map(|_| ()), Err(SealError::Key("3 bytes, not 32".into())));
    }
}
