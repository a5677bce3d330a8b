//! Who changed what, through the real admin listener: named admin tokens
//! (`WAITGATE_ADMIN_TOKENS`, read again on SIGHUP), the audit line of each
//! change in text and JSON, and live overrides against reloads.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::*;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";
const CAROL: &str = "carol-token-0123456789abcdef";

fn write_tokens(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// An admin call with `token`; the answer.
fn call(wg: &Waitgate, token: &str, method: &str, path: &str, body: Option<&str>) -> Response {
    let auth = format!("Bearer {token}");
    let mut headers = vec![("Authorization", auth.as_str())];
    if body.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    request(wg.admin, method, path, &headers, body.map(str::as_bytes)).unwrap()
}

/// The log's audit lines (text format).
fn audit_lines(wg: &Waitgate) -> Vec<String> {
    wg.log_lines("waitgate::audit")
}

#[test]
fn each_named_token_signs_its_changes_and_a_reload_of_the_file_takes_effect() {
    let redis = Redis::start_free();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-tokens");
    write_tokens(
        &file,
        &format!("# who may run the sale\nalice {ALICE}\nbob   {BOB}\n"),
    );
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .queues("baseball: {}")
        .start_env(&[
            ("WAITGATE_ADMIN_TOKENS", file.to_str().unwrap()),
            ("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN),
        ]);
    let pause = "/admin/v1/queues/baseball/pause";
    let resume = "/admin/v1/queues/baseball/resume";

    assert_eq!(call(&wg, ALICE, "POST", pause, None).status, 200);
    assert_eq!(call(&wg, BOB, "POST", resume, None).status, 200);
    assert_eq!(call(&wg, ADMIN_TOKEN, "POST", pause, None).status, 200);
    for wrong in [CAROL, "alice", &ALICE[1..]] {
        let r = call(&wg, wrong, "POST", resume, None);
        assert_eq!(r.status, 401, "{wrong}: {r:?}");
    }
    wg.wait_for_log("waitgate::audit", 3);
    let lines = audit_lines(&wg);
    assert_eq!(
        lines.len(),
        3,
        "one line a change, none for a refusal: {lines:#?}"
    );
    for (line, actor, action, before, after) in [
        (&lines[0], "alice", "pause", "false", "true"),
        (&lines[1], "bob", "resume", "true", "false"),
        (&lines[2], "admin", "pause", "false", "true"),
    ] {
        for field in [
            format!("actor={actor}"),
            format!("action={action}"),
            "queue=baseball".to_string(),
            format!(r#"before={{"paused":{before}}}"#),
            format!(r#"after={{"paused":{after}}}"#),
        ] {
            assert!(line.contains(&field), "{field} in {line}");
        }
        assert!(!line.contains("Pause"), "no Rust debug text: {line}");
    }
    let log = wg.log();
    assert!(
        !log.contains(ALICE) && !log.contains(BOB),
        "no token in the log"
    );

    // Bob leaves, Carol joins: a SIGHUP reads the file again.
    write_tokens(&file, &format!("alice {ALICE}\ncarol {CAROL}\n"));
    wg.signal("HUP");
    wg.wait_for_log("admin tokens reloaded", 1);
    assert!(wg.log().contains("added=carol removed=bob"), "{}", wg.log());
    assert_eq!(call(&wg, BOB, "POST", resume, None).status, 401);
    assert_eq!(call(&wg, CAROL, "POST", resume, None).status, 200);
    assert_eq!(
        call(&wg, ALICE, "GET", "/admin/v1/queues", None).status,
        200
    );
    assert_eq!(
        call(&wg, ADMIN_TOKEN, "GET", "/admin/v1/queues", None).status,
        200
    );
    wg.wait_for_log("actor=carol action=resume", 1);

    // A file that does not parse changes nothing, and says why.
    write_tokens(&file, &format!("alice {ALICE}\ndave short\n"));
    wg.signal("HUP");
    wg.wait_for_log("admin tokens not reloaded", 1);
    let log = wg.log();
    assert!(log.contains("line 2: a token must be at least 16"), "{log}");
    assert!(!log.contains("short\n"), "{log}");
    assert_eq!(call(&wg, CAROL, "POST", pause, None).status, 200);

    // A file others can read is named at each read.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&file, format!("alice {ALICE}\n")).unwrap();
    wg.signal("HUP");
    wg.wait_for_log("readable by other users", 1);
    assert_eq!(call(&wg, CAROL, "POST", resume, None).status, 401);
}

#[test]
fn a_token_file_that_does_not_parse_stops_the_start_and_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-tokens");
    let config = dir.path().join("waitgate.yaml");
    std::fs::write(
        &config,
        TestConfig::on_free_ports("redis://127.0.0.1:1/0", free_port())
            .queues("baseball: {}")
            .yaml(),
    )
    .unwrap();
    for (text, says) in [
        (
            format!("alice {ALICE}\nbob\n"),
            "line 2: expected `name token`",
        ),
        (
            format!("alice {ALICE}\nalice {BOB}\n"),
            "line 2: the name \"alice\" is given twice",
        ),
        (
            format!("alice {ALICE}\nbob {ALICE}\n"),
            "\"bob\" has the same token as \"alice\"",
        ),
    ] {
        write_tokens(&file, &text);
        let out = std::process::Command::new(binary())
            .args(["-t", "-c", config.to_str().unwrap()])
            .env("JWT_SECRET", SECRET_B64)
            .env("WAITGATE_ADMIN_TOKENS", &file)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}: {stderr}");
        assert!(stderr.contains(says), "{says} in {stderr}");
        assert!(!stderr.contains(ALICE), "no token in the message: {stderr}");
    }
}

#[test]
fn with_json_logs_an_audit_line_is_one_object_whose_fields_are_the_change() {
    let redis = Redis::start_free();
    let wg = TestConfig::on_free_ports(&redis.url(), free_port())
        .queues("baseball: {}")
        .log("{format: json}")
        .start_env(&[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let r = admin(
        &wg,
        "POST",
        "/admin/v1/queues/baseball/close",
        Some(r#"{"message":"Sold out. Thank you!"}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = admin(
        &wg,
        "PATCH",
        "/admin/v1/queues/baseball/admission",
        Some(r#"{"batchSize":3}"#),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let r = revoke(&wg, "u-1");
    assert_eq!(r.status, 200, "{r:?}");
    wg.wait_for_log("admin change", 3);
    let lines: Vec<serde_json::Value> = wg
        .log_lines("admin change")
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    let field = |line: &serde_json::Value, name: &str| -> serde_json::Value {
        let text = line[name]
            .as_str()
            .unwrap_or_else(|| panic!("{name} in {line}"));
        serde_json::from_str(text).unwrap()
    };
    let close = &lines[0];
    assert_eq!(close["actor"], "admin", "{close}");
    assert_eq!(close["action"], "close");
    assert_eq!(close["queue"], "baseball");
    assert_eq!(
        field(close, "before"),
        serde_json::json!({"closed": false, "message": null})
    );
    assert_eq!(
        field(close, "after"),
        serde_json::json!({"closed": true, "message": "Sold out. Thank you!"})
    );
    let admission = &lines[1];
    assert_eq!(admission["action"], "admission");
    assert_eq!(field(admission, "before")["batchSize"], 100, "{admission}");
    assert_eq!(field(admission, "after")["batchSize"], 3, "{admission}");
    assert_eq!(
        field(admission, "after")["overridden"],
        serde_json::json!(["batchSize"])
    );
    let revoke = &lines[2];
    assert_eq!(revoke["action"], "revoke");
    assert_eq!(field(revoke, "before")["userId"], "u-1");
    assert_eq!(field(revoke, "after")["revoked"], true);
}

#[test]
fn a_reload_a_live_override_masks_is_named_and_delete_drops_the_override() {
    let redis = Redis::start_free();
    let config = TestConfig::on_free_ports(&redis.url(), free_port())
        .queues("baseball: {admission: {batch-size: 6, interval-ms: 1000}}");
    let wg = config.start_env(&[("WAITGATE_ADMIN_TOKEN", ADMIN_TOKEN)]);
    let status = || admin(&wg, "GET", "/admin/v1/queues/baseball", None).json();
    let v = status();
    assert_eq!(v["configured"]["batchSize"], 6, "{v}");
    assert_eq!(v["inEffect"]["batchSize"], 6, "{v}");
    assert_eq!(v["overridden"], serde_json::json!([]), "{v}");

    assert_eq!(patch_admission(&wg, r#"{"batchSize":3}"#).status, 200);
    let v = status();
    assert_eq!(
        (&v["configured"]["batchSize"], &v["inEffect"]["batchSize"]),
        (&serde_json::json!(6), &serde_json::json!(3)),
        "{v}"
    );
    assert_eq!(v["overridden"], serde_json::json!(["batchSize"]), "{v}");

    // The file's batch goes 6 -> 4 and its interval 1000 -> 500: the
    // batch is masked by the override, the interval is not.
    let reloaded = config
        .clone()
        .queues("baseball: {admission: {batch-size: 4, interval-ms: 500}}");
    wg.reload(reloaded.yaml());
    wg.wait_for_log("config reloaded", 1);
    wg.wait_for_log("masked by a live override", 1);
    let warnings = wg.log_lines("masked by a live override");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    for part in [
        "WARN",
        "key=queues.baseball.admission.batch-size",
        "configured=4",
        "in_effect=3",
        "DELETE /admin/v1/queues/baseball/admission",
    ] {
        assert!(warnings[0].contains(part), "{part} in {}", warnings[0]);
    }
    let v = status();
    assert_eq!(v["configured"]["batchSize"], 4, "{v}");
    assert_eq!(v["inEffect"]["batchSize"], 3, "{v}");
    assert_eq!(v["inEffect"]["intervalMs"], 500, "{v}");

    // DELETE drops every override: the file's values are in effect.
    let r = admin(&wg, "DELETE", "/admin/v1/queues/baseball/admission", None);
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert_eq!(v["inEffect"]["batchSize"], 4, "{v}");
    assert_eq!(v["overridden"], serde_json::json!([]), "{v}");
    wg.wait_for_log("action=admission", 2);
    assert!(
        wg.log()
            .contains(r#"after={"batchSize":4,"intervalMs":500,"maxActive":0,"overridden":[]}"#),
        "{}",
        wg.log()
    );
    // With no override left, a reload says nothing of masking.
    wg.reload(config.clone().yaml());
    wg.wait_for_log("config reloaded", 2);
    assert_eq!(
        wg.log().matches("masked by a live override").count(),
        1,
        "{}",
        wg.log()
    );
    let r = admin(
        &wg,
        "PUT",
        "/admin/v1/queues/baseball/admission",
        Some("{}"),
    );
    assert_eq!(
        (r.status, r.header("Allow")),
        (405, Some("PATCH, DELETE")),
        "{r:?}"
    );
}
