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

/// `iam-policy --target-account`: what another account's admin creates for an AWSAccount. The
/// role's trust names exactly the operator's principal, with the ExternalId (a placeholder when
/// none is given) and the installation's session tag; its permission policy and the boundary
/// are the operator's, scoped to that account. A session ARN, the account root or a malformed
/// id is refused naming the flag. `--assume-role-arn` gives the operator exactly those roles.
#[test]
fn target_account_renders_what_the_other_account_needs() {
    use s3_operator::aws::{naming, policy};

    let bin = env!("CARGO_BIN_EXE_s3-operator");
    let run = |args: &[&str]| {
        Command::new(bin)
            .arg("iam-policy")
            .args(args)
            .env_remove("AWS_ACCOUNT_ID")
            .env_remove("CLUSTER_NAME")
            .output()
            .expect("s3-operator runs")
    };
    let json = |args: &[&str]| -> serde_json::Value {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let principal = "arn:aws:iam::123456789012:role/platform/s3-operator";
    let target = [
        "--target-account",
        "210987654321",
        "--operator-principal",
        principal,
        "--cluster-name",
        "prod",
    ];
    assert_eq!(
        json(&[&target[..], &["--trust", "--external-id", "ext-1"]].concat()),
        policy::trust_policy(principal, "ext-1", "prod")
    );
    let placeholder = json(&[&target[..], &["--trust"]].concat());
    assert_eq!(
        placeholder["Statement"][0]["Condition"]["StringEquals"]["sts:ExternalId"],
        "${EXTERNAL_ID}"
    );
    assert_eq!(placeholder["Statement"][0]["Principal"]["AWS"], principal);
    let scope = policy::Scope {
        partition: "aws".into(),
        account: "210987654321".into(),
        bucket_prefix: naming::bucket_prefix("prod", None).unwrap(),
        iam_path: naming::iam_path("prod"),
    };
    assert_eq!(json(&target), policy::operator_policy(&scope));
    assert_eq!(
        json(&[&target[..], &["--boundary"]].concat()),
        policy::boundary_policy(&scope)
    );
    // An AWSAccount with names of its own: the policy and boundary are scoped to them; the
    // root path, which would reach every identity there, is refused naming the flag.
    let own = [
        "--bucket-name-prefix",
        "pay-",
        "--iam-path",
        "/platform/s3/",
    ];
    let named = policy::Scope {
        bucket_prefix: "pay-".into(),
        iam_path: "/platform/s3/".into(),
        ..scope.clone()
    };
    assert_eq!(
        json(&[&target[..], &own].concat()),
        policy::operator_policy(&named)
    );
    assert_eq!(
        json(&[&target[..], &own, &["--boundary"]].concat()),
        policy::boundary_policy(&named)
    );
    let out = run(&[&target[..], &["--iam-path", "/"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--iam-path") && err.contains("not the root /"),
        "{err}"
    );
    // The member account's drift-event forwarding, to the bus of the queue's account.
    let queue = "arn:aws:sqs:us-east-1:123456789012:s3-operator-prod-drift";
    let forward = ["--drift-events-queue-arn", queue, "--drift-events-rule"];
    assert_eq!(
        json(&[&target[..], &forward].concat()),
        s3_operator::aws::drift_queue::member_rule(
            "aws",
            "210987654321",
            "123456789012",
            "us-east-1",
            "prod",
            "s3op-prod-"
        )
    );
    for (args, says) in [
        (&forward[..2], "needs --drift-events-rule"),
        (
            &[
                "--drift-events-queue-arn",
                "arn:aws:sqs:us-east-1:210987654321:q",
                "--drift-events-rule",
            ][..],
            "operator's own account",
        ),
    ] {
        let out = run(&[&target[..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
    }

    for (flag, value, says) in [
        (
            "--operator-principal",
            "arn:aws:sts::123456789012:assumed-role/s3-operator/i-0abc",
            "pass the role's own ARN",
        ),
        (
            "--operator-principal",
            "arn:aws:iam::123456789012:root",
            "whole account",
        ),
        ("--target-account", "21098765432", "exactly 12 digits"),
    ] {
        let mut args = target.to_vec();
        let at = args.iter().position(|a| *a == flag).unwrap();
        args[at + 1] = value;
        args.push("--trust");
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{value}: {err}");
        assert!(err.contains(flag) && err.contains(says), "{value}: {err}");
    }

    let roles = [
        "arn:aws:iam::210987654321:role/s3op-target-prod",
        "arn:aws:iam::310987654321:role/team/s3op-target-prod",
        "arn:aws:iam::410987654321:role/s3op-target-prod",
    ];
    let own = json(&[
        "--account-id",
        "123456789012",
        "--cluster-name",
        "prod",
        "--assume-role-arn",
        &roles[..2].join(","),
        "--assume-role-arn",
        roles[2],
    ]);
    let statements = own["Statement"].as_array().unwrap();
    let assume: Vec<_> = statements
        .iter()
        .filter(|s| s.to_string().contains("sts:"))
        .collect();
    assert_eq!(assume.len(), 1, "{own:#}");
    assert_eq!(
        assume[0]["Action"],
        serde_json::json!(["sts:AssumeRole", "sts:TagSession"])
    );
    assert_eq!(assume[0]["Resource"], serde_json::json!(roles));
}
