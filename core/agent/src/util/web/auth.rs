//! `basic_auth_users`: HTTP basic authentication against bcrypt hashes, as exporter-toolkit
//! does it: bcrypt runs one at a time on a blocking thread (a flood of wrong passwords
//! costs one core, not the runtime), the outcome of a (user, hash, password) is cached so a
//! scraper with the right password pays bcrypt once, and an unknown user costs the same
//! time as a known one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine;
use sha2::{Digest, Sha256};

/// Outcomes remembered; past it the cache starts again (a flood of wrong passwords cannot
/// grow it).
const CACHE_ENTRIES: usize = 100;

/// The users and their hashes, with the cache of checked credentials.
#[derive(Debug)]
pub struct Users {
    users: BTreeMap<String, String>,
    cache: Mutex<HashMap<[u8; 32], bool>>,
    bcrypt: Mutex<()>,
}

fn dummy_hash() -> &'static str {
    static H: OnceLock<String> = OnceLock::new();
    H.get_or_init(|| bcrypt::hash("rocewatch: a user that does not exist", 10).unwrap_or_default())
}

impl Users {
    pub fn new(users: BTreeMap<String, String>) -> Arc<Users> {
        Arc::new(Users {
            users,
            cache: Mutex::new(HashMap::new()),
            bcrypt: Mutex::new(()),
        })
    }

    /// Whether an `Authorization` header's value names a user and the right password.
    pub async fn allows(self: &Arc<Self>, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(basic) else {
            return false;
        };
        let hash = self.users.get(&user).cloned();
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| dummy_hash().to_string());
        let key: [u8; 32] = {
            let mut h = Sha256::new();
            for part in [user.as_bytes(), hash.as_bytes(), password.as_bytes()] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part);
            }
            h.finalize().into()
        };
        if let Some(ok) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return *ok;
        }
        let me = Arc::clone(self);
        let ok = tokio::task::spawn_blocking(move || {
            let _one_at_a_time = me.bcrypt.lock().unwrap_or_else(|p| p.into_inner());
            bcrypt::verify(&password, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false)
            && known;
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, ok);
        ok
    }
}

/// `Basic base64(user:password)` → (user, password).
pub(super) fn basic(value: &[u8]) -> Option<(String, String)> {
    let v = std::str::from_utf8(value).ok()?;
    let (scheme, rest) = v.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(user: &str, password: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn right_password_in_wrong_out_and_outcomes_are_cached() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        // htpasswd writes $2y$: the same hash under that prefix verifies too.
        let y = hash.replacen("$2b$", "$2y$", 1);
        let users = Users::new(BTreeMap::from([
            ("prometheus".to_string(), hash),
            ("alice".to_string(), y),
        ]));
        assert!(users.allows(Some(&header("prometheus", "s3cret"))).await);
        assert!(users.allows(Some(&header("alice", "s3cret"))).await);
        assert!(!users.allows(Some(&header("prometheus", "wrong"))).await);
        assert!(!users.allows(Some(&header("mallory", "s3cret"))).await);
        assert!(!users.allows(None).await);
        assert!(!users.allows(Some(b"Bearer s3cret")).await);
        assert!(!users.allows(Some(b"Basic !!!")).await);
        assert_eq!(users.cache.lock().unwrap().len(), 4);
        // A cached outcome is the same outcome.
        assert!(users.allows(Some(&header("prometheus", "s3cret"))).await);
        assert!(!users.allows(Some(&header("prometheus", "wrong"))).await);
    }

    #[tokio::test]
    async fn a_flood_of_wrong_passwords_cannot_grow_the_cache() {
        let users = Users::new(BTreeMap::from([(
            "u".to_string(),
            bcrypt::hash("p", 4).unwrap(),
        )]));
        for i in 0..(CACHE_ENTRIES + 20) {
            assert!(!users.allows(Some(&header("u", &format!("guess{i}")))).await);
        }
        assert!(users.cache.lock().unwrap().len() <= CACHE_ENTRIES);
        assert!(users.allows(Some(&header("u", "p"))).await);
    }
}
