//! `basic_auth_users`: HTTP basic authentication against bcrypt hashes, as exporter-toolkit
//! does it: bcrypt runs one at a time on a blocking thread (a flood of wrong passwords
//! costs one core, not the runtime), a (user, hash, password) that was right is remembered
//! so a scraper pays bcrypt once (wrong ones are not: they cannot push it out), and an
//! unknown user costs the same time as a known one (a dummy hash at the highest cost
//! configured).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine;
use sha2::{Digest, Sha256};

/// Right credentials remembered (distinct users and passwords in use: a handful); past it
/// the cache starts again.
const CACHE_ENTRIES: usize = 100;

/// The users and their hashes, with the cache of checked credentials.
#[derive(Debug)]
pub struct Users {
    users: BTreeMap<String, String>,
    cache: Mutex<HashSet<[u8; 32]>>,
    bcrypt: Mutex<()>,
    /// Checked against when the user is unknown, at the highest cost configured.
    dummy: OnceLock<String>,
}

impl Users {
    pub fn new(users: BTreeMap<String, String>) -> Arc<Users> {
        Arc::new(Users {
            users,
            cache: Mutex::new(HashSet::new()),
            bcrypt: Mutex::new(()),
            dummy: OnceLock::new(),
        })
    }

    /// Whether an `Authorization` header's value names a user and the right password.
    pub async fn allows(self: &Arc<Self>, authorization: Option<&[u8]>) -> bool {
        let Some((user, password)) = authorization.and_then(basic) else {
            return false;
        };
        let hash = self.users.get(&user).cloned();
        let known = hash.is_some();
        let key: [u8; 32] = {
            let mut h = Sha256::new();
            for part in [
                user.as_bytes(),
                hash.as_deref().unwrap_or("").as_bytes(),
                password.as_bytes(),
            ] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part);
            }
            h.finalize().into()
        };
        if known
            && self
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&key)
        {
            return true;
        }
        let me = Arc::clone(self);
        let ok = tokio::task::spawn_blocking(move || {
            let hash = hash.unwrap_or_else(|| me.dummy().to_string());
            let _one_at_a_time = me.bcrypt.lock().unwrap_or_else(|p| p.into_inner());
            bcrypt::verify(&password, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false)
            && known;
        if ok {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.len() >= CACHE_ENTRIES {
                cache.clear();
            }
            cache.insert(key);
        }
        ok
    }

    /// A hash of nothing anyone knows, at the highest cost among the users' (computed on
    /// first need, on a blocking thread).
    fn dummy(&self) -> &str {
        self.dummy.get_or_init(|| {
            let cost = self
                .users
                .values()
                .filter_map(|h| h.parse::<bcrypt::HashParts>().ok())
                .map(|p| p.get_cost())
                .max()
                .unwrap_or(bcrypt::DEFAULT_COST);
            bcrypt::hash("rocewatch: a user that does not exist", cost).unwrap_or_default()
        })
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
        assert_eq!(users.cache.lock().unwrap().len(), 2, "right ones only");
        // A cached outcome is the same outcome.
        assert!(users.allows(Some(&header("prometheus", "s3cret"))).await);
        assert!(!users.allows(Some(&header("prometheus", "wrong"))).await);
    }

    #[tokio::test]
    async fn a_flood_of_wrong_passwords_cannot_push_the_right_one_out() {
        let users = Users::new(BTreeMap::from([(
            "u".to_string(),
            bcrypt::hash("p", 4).unwrap(),
        )]));
        assert!(users.allows(Some(&header("u", "p"))).await);
        for i in 0..(CACHE_ENTRIES + 20) {
            assert!(!users.allows(Some(&header("u", &format!("guess{i}")))).await);
        }
        assert_eq!(users.cache.lock().unwrap().len(), 1);
        assert!(users.allows(Some(&header("u", "p"))).await);
        // The unknown user's dummy hash has the users' cost.
        assert!(users.dummy().starts_with("$2b$04$"), "{}", users.dummy());
    }
}
