//! Permissions by lock-key prefix: the permissions file (`--acl-file`, TOML), its principals (named by an API key's SHA-256 or a client certificate's name) and the longest-prefix rule that decides.
//!
//! ```toml
//! [principals.billing]
//! api_key_sha256 = "9f86d081884c7d65..."
//! rules = [ { prefix = "billing:", allow = ["read", "lock"] } ]
//! ```
//!
//! A check is a few hash look-ups and no Redis call: each principal's rules
//! are a map from prefix to permissions, looked up with the key cut to each
//! prefix length that occurs, longest first.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// What a principal may do with a lock key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// `GET /locks/{key}`, listing, events.
    Read,
    /// Acquire (plain, streamed, batch), release, extend, value, mode.
    Lock,
    /// `DELETE /locks/{key}?force=true`.
    Revoke,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Lock => "lock",
            Self::Revoke => "revoke",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Self::Read => 1,
            Self::Lock => 2,
            Self::Revoke => 4,
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of permissions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allowed(u8);

impl Allowed {
    pub fn contains(self, permission: Permission) -> bool {
        self.0 & permission.bit() != 0
    }
}

/// One principal: its name and its rules.
#[derive(Debug)]
pub struct Principal {
    pub name: Arc<str>,
    rules: Rules,
}

impl Principal {
    /// Whether the principal may do `permission` with `key`: the rule with
    /// the longest prefix of `key` decides; no rule, no permission.
    pub fn may(&self, permission: Permission, key: &str) -> bool {
        self.rules.allowed(key).contains(permission)
    }
}

/// A principal's rules, by prefix.
#[derive(Debug, Default)]
struct Rules {
    by_prefix: HashMap<Box<str>, Allowed>,
    /// The prefixes' lengths, longest first, each once.
    lengths: Vec<usize>,
}

impl Rules {
    fn allowed(&self, key: &str) -> Allowed {
        for &length in &self.lengths {
            if let Some(allowed) = key.get(..length).and_then(|p| self.by_prefix.get(p)) {
                return *allowed;
            }
        }
        Allowed::default()
    }
}

/// A parsed permissions file.
#[derive(Debug, Default)]
pub struct Acl {
    principals: Vec<Principal>,
    by_key_sha256: HashMap<[u8; 32], usize>,
    by_cert_name: HashMap<Box<str>, usize>,
}

/// Why a permissions file was refused: the line, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct AclError {
    pub line: usize,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    #[serde(default)]
    principals: BTreeMap<String, PrincipalText>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalText {
    #[serde(default, deserialize_with = "sha256_hex")]
    api_key_sha256: Option<[u8; 32]>,
    client_cert: Option<String>,
    #[serde(default)]
    rules: Vec<RuleText>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleText {
    prefix: String,
    allow: Vec<Permission>,
}

fn sha256_hex<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<[u8; 32]>, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_sha256_hex(&text).map(Some).ok_or_else(|| {
        serde::de::Error::custom("api_key_sha256 is 64 hex digits (`lockgate acl hash`)")
    })
}

fn parse_sha256_hex(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (index, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(index * 2..index * 2 + 2)?, 16).ok()?;
    }
    Some(digest)
}

/// The SHA-256 of an API key, in lower-case hex, as the permissions file
/// names it.
pub fn api_key_sha256(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

impl Acl {
    /// Parses a permissions file's text.
    pub fn parse(text: &str) -> Result<Self, AclError> {
        let file: FileText = toml::from_str(text).map_err(|err| AclError {
            line: err.span().map_or(1, |span| line_of(text, span.start)),
            message: err.message().trim().to_owned(),
        })?;
        let mut acl = Self::default();
        for (name, entry) in file.principals {
            let at = |message: String| AclError {
                line: text
                    .find(&format!("principals.{name}"))
                    .map_or(1, |offset| line_of(text, offset)),
                message,
            };
            if entry.api_key_sha256.is_none() && entry.client_cert.is_none() {
                return Err(at(format!(
                    "principal {name} needs api_key_sha256 or client_cert"
                )));
            }
            let index = acl.principals.len();
            if let Some(digest) = entry.api_key_sha256
                && acl.by_key_sha256.insert(digest, index).is_some()
            {
                return Err(at(format!(
                    "principal {name}: another principal has the same api_key_sha256"
                )));
            }
            if let Some(cert) = entry.client_cert {
                if cert.is_empty() {
                    return Err(at(format!("principal {name}: client_cert is empty")));
                }
                if acl.by_cert_name.insert(cert.into(), index).is_some() {
                    return Err(at(format!(
                        "principal {name}: another principal has the same client_cert"
                    )));
                }
            }
            let mut rules = Rules::default();
            for rule in entry.rules {
                let allowed = rule.allow.iter().fold(Allowed::default(), |allowed, p| {
                    Allowed(allowed.0 | p.bit())
                });
                let length = rule.prefix.len();
                if rules
                    .by_prefix
                    .insert(rule.prefix.into(), allowed)
                    .is_some()
                {
                    return Err(at(format!(
                        "principal {name}: two rules for the same prefix"
                    )));
                }
                if !rules.lengths.contains(&length) {
                    rules.lengths.push(length);
                }
            }
            rules.lengths.sort_unstable_by(|a, b| b.cmp(a));
            acl.principals.push(Principal {
                name: name.into(),
                rules,
            });
        }
        Ok(acl)
    }

    /// Reads and parses a permissions file.
    pub fn load(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|err| format!("cannot read the permissions file {}: {err}", path.display()))?;
        Self::parse(&text)
            .map_err(|err| format!("the permissions file {} is invalid: {err}", path.display()))
    }

    /// The principal whose API key this is, by its index.
    pub fn find_by_api_key(&self, key: &str) -> Option<usize> {
        let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        self.by_key_sha256.get(&digest).copied()
    }

    /// The principal named by one of a client certificate's names, by its index.
    pub fn find_by_cert_names<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Option<usize> {
        names
            .into_iter()
            .find_map(|name| self.by_cert_name.get(name))
            .copied()
    }

    /// The principal at `index` (from a `find_*`); panics on another index.
    pub fn principal(&self, index: usize) -> &Principal {
        &self.principals[index]
    }

    #[cfg(test)]
    fn by_api_key(&self, key: &str) -> Option<&Principal> {
        self.find_by_api_key(key).map(|index| self.principal(index))
    }

    #[cfg(test)]
    fn by_cert_names<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Option<&Principal> {
        self.find_by_cert_names(names)
            .map(|index| self.principal(index))
    }

    pub fn principals(&self) -> usize {
        self.principals.len()
    }
}

/// The 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&byte| byte == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_SERVICES: &str = r#"
[principals.billing]
api_key_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
rules = [ { prefix = "billing:", allow = ["read", "lock"] },
          { prefix = "billing:audit:", allow = ["read"] },
          { prefix = "shared:", allow = ["read"] } ]

[principals.ops]
client_cert = "ops.internal"
rules = [ { prefix = "", allow = ["read", "lock", "revoke"] } ]
"#;

    #[test]
    fn the_longest_matching_prefix_decides() {
        let acl = Acl::parse(TWO_SERVICES).unwrap();
        let billing = acl.by_api_key("test").unwrap();
        assert_eq!(&*billing.name, "billing");
        assert!(billing.may(Permission::Lock, "billing:42"));
        assert!(!billing.may(Permission::Revoke, "billing:42"));
        assert!(billing.may(Permission::Read, "billing:audit:1"));
        assert!(!billing.may(Permission::Lock, "billing:audit:1"));
        assert!(billing.may(Permission::Read, "shared:x"));
        assert!(!billing.may(Permission::Lock, "shared:x"));
        assert!(!billing.may(Permission::Read, "orders:1"));
        assert!(!billing.may(Permission::Read, "billing"));
        let ops = acl.by_cert_names(["x", "ops.internal"]).unwrap();
        assert!(ops.may(Permission::Revoke, "anything"));
        assert!(acl.by_api_key("other").is_none());
        assert!(acl.by_cert_names(["billing"]).is_none());
    }

    #[test]
    fn errors_name_their_line() {
        let bad = "[principals.a]\napi_key_sha256 = \"00\"\n";
        assert_eq!(Acl::parse(bad).unwrap_err().line, 2);
        let bad = "[principals.a]\nclient_cert = \"a\"\nrules = [ { prefix = \"x\", allow = [\"write\"] } ]\n";
        assert_eq!(Acl::parse(bad).unwrap_err().line, 3);
        let bad = "\n[principals.a]\nrules = []\n";
        assert_eq!(Acl::parse(bad).unwrap_err().line, 2);
        assert!(Acl::parse("[principals.a\n").is_err());
    }

    /// The check alone, with 1000 rules: printed, bounded generously (a
    /// broken look-up, such as a scan of every rule per prefix, is far slower).
    #[test]
    fn a_check_among_1000_rules_is_cheap() {
        let mut text = format!(
            "[principals.p]\napi_key_sha256 = \"{}\"\nrules = [\n",
            api_key_sha256("k")
        );
        for index in 0..999 {
            text.push_str(&format!(
                "{{ prefix = \"svc{index}:part{}:\", allow = [\"read\"] }},\n",
                index % 7
            ));
        }
        text.push_str("{ prefix = \"orders:\", allow = [\"lock\"] } ]\n");
        let acl = Acl::parse(&text).unwrap();
        let checks = 100_000;
        let started = std::time::Instant::now();
        let mut granted = 0;
        for index in 0..checks {
            let principal = acl.principal(acl.find_by_api_key("k").unwrap());
            let key = if index % 2 == 0 {
                "orders:4242:line:7"
            } else {
                "svc500:part3:x"
            };
            granted += usize::from(principal.may(Permission::Lock, key));
        }
        let each = started.elapsed() / checks;
        println!("one permissions check among 1000 rules (API key hashed): {each:?}");
        assert_eq!(granted, 50_000);
        assert!(each < std::time::Duration::from_micros(200), "{each:?}");
    }

    #[test]
    fn the_hash_is_sha256_hex() {
        assert_eq!(
            api_key_sha256("test"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }
}
