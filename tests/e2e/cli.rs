//! The binary's own command line, without a cluster.

use std::process::Command;

use crate::support::repo;

/// `s3-operator --version` names the crate version and the commit it was built from (build.rs).
#[test]
fn version_names_the_crate_version_and_the_git_commit() {
    for flag in ["--version", "-V"] {
        let out = Command::new(env!("CARGO_BIN_EXE_s3-operator"))
            .arg(flag)
            .output()
            .expect("s3-operator runs");
        assert!(out.status.success(), "{flag}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let commit = text
            .trim_end()
            .strip_prefix(&format!("s3-operator {} (commit ", s3_operator::VERSION))
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("{flag}: unexpected format {text:?}"));
        // Built from this checkout, the binary names its HEAD: build.rs reruns when HEAD moves.
        // Without git (a source tarball) it says `unknown`.
        let head = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(repo())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        match head {
            Some(head) => assert!(
                commit.len() >= 7
                    && commit.chars().all(|c| c.is_ascii_hexdigit())
                    && head.starts_with(commit),
                "{flag}: commit {commit:?} is not HEAD {head}"
            ),
            None => assert_eq!(commit, "unknown", "{flag}"),
        }
    }
}

/// Two installations never overlap: a cluster name must already be in the one form that goes
/// into tags, the IAM path and the bucket prefix (no `Prod`/`prod`, `prod_eu`/`prod-eu` folding
/// into one), and a name with '-' gets no default prefix (`s3op-a-` would cover `s3op-a-b-`).
/// Both the rendered policy and the operator itself refuse them before anything is touched.
#[test]
fn cluster_names_that_would_overlap_another_installation_are_refused() {
    let bin = env!("CARGO_BIN_EXE_s3-operator");
    let run = |args: &[&str]| {
        Command::new(bin)
            .args(args)
            .output()
            .expect("s3-operator runs")
    };
    for bad in ["Prod", "prod_eu", "a--b", "-a"] {
        for cmd in [
            &["iam-policy", "--account-id", "123456789012"][..],
            &["run"],
        ] {
            // `=`: clap would take `-a` after a space for a flag of its own.
            let flag = format!("--cluster-name={bad}");
            let out = run(&[cmd, &[flag.as_str()]].concat());
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{bad} {cmd:?}: {err}");
            assert!(err.contains("single hyphens"), "{bad}: {err}");
        }
    }
    for cmd in [
        &["iam-policy", "--account-id", "123456789012"][..],
        &["run"],
    ] {
        let out = run(&[cmd, &["--cluster-name", "a-b"]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {err}");
        assert!(
            err.contains("--bucket-name-prefix") && err.contains("\"a\""),
            "{cmd:?}: {err}"
        );
    }
    // With its own prefix a hyphenated name is served, and the policy covers exactly that prefix.
    let out = run(&[
        "iam-policy",
        "--account-id",
        "123456789012",
        "--cluster-name",
        "a-b",
        "--bucket-name-prefix",
        "team-ab-",
    ]);
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["Statement"][0]["Resource"], "arn:aws:s3:::team-ab-*");
    let out = run(&[
        "iam-policy",
        "--account-id",
        "123456789012",
        "--cluster-name",
        "a",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["Statement"][0]["Resource"], "arn:aws:s3:::s3op-a-*");
}
