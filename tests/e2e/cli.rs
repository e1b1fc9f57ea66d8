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
