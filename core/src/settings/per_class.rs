//! Settings whose defaults depend on the provider class (`api_key`, `oauth`, `local`), and
//! whose partial tables are filled from that class's own defaults.

use crate::types::ProviderClass;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

/// Values that differ by provider class: one table each for `api_key`, `oauth` and `local`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PerClass<T> {
    /// API-key providers.
    pub api_key: T,
    /// OAuth providers.
    pub oauth: T,
    /// Local providers.
    pub local: T,
}

impl<T> PerClass<T> {
    /// The value for one class.
    pub fn get(&self, class: ProviderClass) -> &T {
        match class {
            ProviderClass::ApiKey => &self.api_key,
            ProviderClass::OAuth => &self.oauth,
            ProviderClass::Local => &self.local,
        }
    }
}

/// A settings table whose defaults depend on the provider class, and whose partial tables are
/// filled from that class's defaults (not another class's).
pub trait ClassDefaults: Sized {
    /// The table with every field optional.
    type Patch: DeserializeOwned;
    /// The defaults of one class.
    fn for_class(class: ProviderClass) -> Self;
    /// Overlays the fields present in `patch`.
    fn apply(&mut self, patch: Self::Patch);
}

impl<T: ClassDefaults> Default for PerClass<T> {
    fn default() -> Self {
        PerClass {
            api_key: T::for_class(ProviderClass::ApiKey),
            oauth: T::for_class(ProviderClass::OAuth),
            local: T::for_class(ProviderClass::Local),
        }
    }
}

/// The three optional class tables as they appear in TOML.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, bound = "")]
struct RawPerClass<P: DeserializeOwned> {
    #[serde(default = "none")]
    api_key: Option<P>,
    #[serde(default = "none")]
    oauth: Option<P>,
    #[serde(default = "none")]
    local: Option<P>,
}

fn none<P>() -> Option<P> {
    None
}

impl<T: ClassDefaults> PerClass<T> {
    pub(super) fn from_patches(api_key: Option<T::Patch>, oauth: Option<T::Patch>, local: Option<T::Patch>) -> Self {
        let mut out = PerClass::<T>::default();
        if let Some(p) = api_key {
            out.api_key.apply(p);
        }
        if let Some(p) = oauth {
            out.oauth.apply(p);
        }
        if let Some(p) = local {
            out.local.apply(p);
        }
        out
    }
}

impl<'de, T: ClassDefaults> Deserialize<'de> for PerClass<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawPerClass::<T::Patch>::deserialize(d)?;
        Ok(PerClass::from_patches(raw.api_key, raw.oauth, raw.local))
    }
}
