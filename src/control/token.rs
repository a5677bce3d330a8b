//! Who may use the admin API: named bearer tokens.
//!
//! - `WAITGATE_ADMIN_TOKENS` names a file of `name token` lines (blank
//!   lines and `#` comments aside), read at start and again on SIGHUP, so
//!   that an operator who leaves loses access without a restart.
//! - `WAITGATE_ADMIN_TOKEN` is one token, named `admin`.
//!
//! Either or both may be set; with neither, the admin API does not exist.
//! The name a request's token carries is the `actor` of the change it
//! makes, in the audit line.

use std::path::{Path, PathBuf};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub const ENV: &str = "WAITGATE_ADMIN_TOKEN";
pub const FILE_ENV: &str = "WAITGATE_ADMIN_TOKENS";

/// The name `WAITGATE_ADMIN_TOKEN`'s token carries.
pub const SINGLE_TOKEN_NAME: &str = "admin";

/// Shorter tokens are refused: the admin API can close a sale.
const MIN_ADMIN_TOKEN_BYTES: usize = 16;

/// A name is what an audit line says: short, and with nothing a log
/// reader would have to escape.
const MAX_NAME_BYTES: usize = 64;

/// One token, kept as its SHA-256: comparing two digests of equal length
/// in constant time tells an attacker nothing about the token's length or
/// its first differing byte.
struct Named {
    name: String,
    digest: [u8; 32],
}

/// The tokens in force.
pub struct AdminTokens(Vec<Named>);

#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    #[error("{0}: a token must be at least {MIN_ADMIN_TOKEN_BYTES} characters (it is {1})")]
    TooShort(String, usize),
    #[error("{0}: a token must be printable ASCII without spaces")]
    NotPrintable(String),
    #[error("{FILE_ENV}: {0}: {1}")]
    Unreadable(PathBuf, std::io::Error),
    #[error(
        "{FILE_ENV}: {0} line {1}: expected `name token`, the name 1 to {MAX_NAME_BYTES} \
         characters of letters, digits, `.`, `_`, `@` or `-`"
    )]
    BadLine(PathBuf, usize),
    #[error("{FILE_ENV}: {0} line {1}: the name {2:?} is given twice")]
    DuplicateName(PathBuf, usize, String),
    #[error("{FILE_ENV}: {0} line {1}: {2:?} has the same token as {3:?}")]
    DuplicateToken(PathBuf, usize, String, String),
}

impl Named {
    fn new(name: &str, token: &str, whose: &str) -> Result<Named, AdminTokenError> {
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(AdminTokenError::NotPrintable(whose.to_string()));
        }
        if token.len() < MIN_ADMIN_TOKEN_BYTES {
            return Err(AdminTokenError::TooShort(whose.to_string(), token.len()));
        }
        Ok(Named {
            name: name.to_string(),
            digest: Sha256::digest(token.as_bytes()).into(),
        })
    }
}

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_BYTES).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

impl AdminTokens {
    /// One token, named `admin` (tests, and `WAITGATE_ADMIN_TOKEN`).
    pub fn single(token: &str) -> Result<AdminTokens, AdminTokenError> {
        Ok(AdminTokens(vec![Named::new(
            SINGLE_TOKEN_NAME,
            token,
            ENV,
        )?]))
    }

    /// `WAITGATE_ADMIN_TOKEN`'s token (if given) and the file's, each name
    /// and each token once.
    fn read(single: Option<&str>, file: Option<&Path>) -> Result<AdminTokens, AdminTokenError> {
        let mut tokens = match single {
            Some(token) => AdminTokens::single(token)?.0,
            None => Vec::new(),
        };
        let Some(path) = file else {
            return Ok(AdminTokens(tokens));
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| AdminTokenError::Unreadable(path.to_path_buf(), e))?;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let number = i + 1;
            let bad = || AdminTokenError::BadLine(path.to_path_buf(), number);
            let mut fields = line.split_ascii_whitespace();
            let (Some(name), Some(token), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad());
            };
            if !valid_name(name) {
                return Err(bad());
            }
            let whose = format!("{FILE_ENV}: {} line {number}", path.display());
            let named = Named::new(name, token, &whose)?;
            if tokens.iter().any(|t| t.name == name) {
                return Err(AdminTokenError::DuplicateName(
                    path.to_path_buf(),
                    number,
                    name.to_string(),
                ));
            }
            if let Some(same) = tokens.iter().find(|t| t.digest == named.digest) {
                return Err(AdminTokenError::DuplicateToken(
                    path.to_path_buf(),
                    number,
                    name.to_string(),
                    same.name.clone(),
                ));
            }
            tokens.push(named);
        }
        Ok(AdminTokens(tokens))
    }

    /// The name of the token an `Authorization` header value carries as
    /// `Bearer <token>`, if it is one of these. Every token is compared,
    /// whichever matches.
    pub fn admits(&self, authorization: &[u8]) -> Option<&str> {
        let given = crate::wire::authorization::bearer(authorization)?;
        let digest: [u8; 32] = Sha256::digest(given).into();
        let mut found = None;
        for token in &self.0 {
            if bool::from(digest.ct_eq(&token.digest)) {
                found = Some(token.name.as_str());
            }
        }
        found
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|t| t.name.as_str())
    }
}

/// The admin API's tokens, and where they come from: a reload reads the
/// file again.
pub struct AdminAccess {
    single: Option<String>,
    file: Option<PathBuf>,
    tokens: ArcSwap<AdminTokens>,
}

impl AdminAccess {
    /// From the environment: `None` when neither variable is set (the
    /// admin API is then off).
    pub fn from_env() -> Result<Option<AdminAccess>, AdminTokenError> {
        let single = std::env::var(ENV).ok();
        let file = std::env::var_os(FILE_ENV)
            .filter(|f| !f.is_empty())
            .map(PathBuf::from);
        if single.is_none() && file.is_none() {
            return Ok(None);
        }
        AdminAccess::new(single, file).map(Some)
    }

    pub fn new(
        single: Option<String>,
        file: Option<PathBuf>,
    ) -> Result<AdminAccess, AdminTokenError> {
        let tokens = AdminTokens::read(single.as_deref(), file.as_deref())?;
        if let Some(path) = &file {
            warn_if_readable_by_others(path);
        }
        if tokens.0.is_empty() {
            tracing::warn!(
                "{FILE_ENV} names no token: every admin request is refused until one is \
                 added and waitgate is sent SIGHUP"
            );
        }
        Ok(AdminAccess {
            single,
            file,
            tokens: ArcSwap::from_pointee(tokens),
        })
    }

    /// The tokens in force now.
    pub fn tokens(&self) -> arc_swap::Guard<std::sync::Arc<AdminTokens>> {
        self.tokens.load()
    }

    /// Reads `WAITGATE_ADMIN_TOKENS` again (on SIGHUP). A file that does not
    /// read or parse changes nothing, and the log says why.
    pub fn reload(&self) {
        let Some(path) = &self.file else { return };
        match AdminTokens::read(self.single.as_deref(), Some(path)) {
            Ok(tokens) => {
                let before: Vec<String> = self.tokens.load().names().map(String::from).collect();
                let now: Vec<&str> = tokens.names().collect();
                let added: Vec<&str> = now
                    .iter()
                    .copied()
                    .filter(|n| !before.iter().any(|b| b == n))
                    .collect();
                let removed: Vec<&str> = before
                    .iter()
                    .map(String::as_str)
                    .filter(|b| !now.contains(b))
                    .collect();
                tracing::info!(
                    tokens = now.len(),
                    added = %added.join(","),
                    removed = %removed.join(","),
                    "admin tokens reloaded"
                );
                warn_if_readable_by_others(path);
                self.tokens.store(std::sync::Arc::new(tokens));
            }
            Err(error) => {
                tracing::warn!(%error, "admin tokens not reloaded; the tokens in force stay");
            }
        }
    }
}

/// A token file others can read hands out the admin API: said at start
/// and on each reload, as ssh says of a private key.
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.permissions().mode() & 0o044 != 0 {
            tracing::warn!(
                file = %path.display(),
                "{FILE_ENV} is readable by other users; chmod 600 it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_only_the_bearer_token() {
        let token = AdminTokens::single("0123456789abcdef-admin").unwrap();
        assert_eq!(
            token.admits(b"Bearer 0123456789abcdef-admin"),
            Some("admin")
        );
        assert!(token.admits(b"bearer  0123456789abcdef-admin ").is_some());
        // The header's grammar is wire::authorization's (tested there);
        // here, that only the very token is taken.
        for wrong in [
            &b"Bearer 0123456789abcdef-admiN"[..],
            b"Bearer 0123456789abcdef-admin2",
            b"Basic 0123456789abcdef-admin",
        ] {
            assert!(token.admits(wrong).is_none(), "{wrong:?}");
        }
        assert!(AdminTokens::single("short").is_err());
        assert!(AdminTokens::single("has a space in it, long").is_err());
    }

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn a_file_names_each_token() {
        let (_dir, path) =
            file("# on-call\nalice 0123456789abcdef-alice\n\n  bob\t0123456789abcdef-bob  \n");
        let tokens = AdminTokens::read(Some("0123456789abcdef-single"), Some(&path)).unwrap();
        assert_eq!(
            tokens.names().collect::<Vec<_>>(),
            ["admin", "alice", "bob"]
        );
        assert_eq!(tokens.admits(b"Bearer 0123456789abcdef-bob"), Some("bob"));
        assert_eq!(
            tokens.admits(b"Bearer 0123456789abcdef-single"),
            Some("admin")
        );
        assert_eq!(tokens.admits(b"Bearer alice"), None);
    }

    #[test]
    fn a_bad_file_is_refused_with_its_line_and_no_token_in_the_message() {
        for (text, says) in [
            ("alice\n", "line 1: expected `name token`"),
            ("alice 0123456789abcdef-alice extra\n", "line 1"),
            ("al ice0123456789abcdef x\n", "line 1"),
            ("al/ice 0123456789abcdef-alice\n", "line 1"),
            ("# x\nalice short\n", "line 2: a token must be at least 16"),
            (
                "alice 0123456789abcdef-alice\nalice 0123456789abcdef-other\n",
                "line 2: the name \"alice\" is given twice",
            ),
            (
                "alice 0123456789abcdef-alice\nbob 0123456789abcdef-alice\n",
                "line 2: \"bob\" has the same token as \"alice\"",
            ),
            ("admin 0123456789abcdef-other\n", "\"admin\" is given twice"),
        ] {
            let (_dir, path) = file(text);
            let error = AdminTokens::read(Some("0123456789abcdef-single"), Some(&path))
                .err()
                .unwrap_or_else(|| panic!("{text:?} was taken"))
                .to_string();
            assert!(error.contains(says), "{text:?}: {error}");
            assert!(!error.contains("0123456789abcdef"), "{error}");
        }
        let error = AdminTokens::read(None, Some(Path::new("/nonexistent/tokens")))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("/nonexistent/tokens"), "{error}");
    }
}
