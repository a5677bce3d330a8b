//! Certificates made in a test with the `openssl` command: a CA, and
//! certificates it signs, each as `<name>.pem` and `<name>.key` in `dir`.

use std::path::Path;
use std::process::Command;

/// Runs `openssl` in `dir`; panics with its message if it fails. Its
/// output.
pub fn openssl(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A self-signed CA: `ca.pem` and `ca.key`.
pub fn ca(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=waitgate test CA",
        ],
    );
}

/// `<name>.pem` and `<name>.key`, for common name `cn`, signed by the CA
/// with the x509 extensions `extensions` (lines of an extfile).
pub fn signed(dir: &Path, name: &str, cn: &str, extensions: &str) {
    let (key, csr, pem, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.cnf"),
    );
    std::fs::write(dir.join(&ext), extensions).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ],
    );
}

/// A CA, and a server certificate it signs (`server.pem` and `server.key`)
/// for `name` and 127.0.0.1.
pub fn ca_and_server(dir: &Path, name: &str) {
    ca(dir);
    signed(
        dir,
        "server",
        name,
        &format!("subjectAltName=DNS:{name},IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"),
    );
}
