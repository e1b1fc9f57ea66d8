//! Stamps the git commit into the binary for `s3-operator --version` (env `S3OP_GIT_COMMIT`).
//!
//! The commit comes from `git rev-parse` in a checkout; where there is no `.git` (the
//! Dockerfile's build stage copies only the sources) from the `S3OP_GIT_COMMIT` environment
//! variable, which the Dockerfile sets from its `GIT_COMMIT` build argument; else `unknown`.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=S3OP_GIT_COMMIT");

    let commit = git(&["rev-parse", "--short=7", "HEAD"])
        .filter(|c| c.chars().all(|c| c.is_ascii_hexdigit()))
        .or_else(|| {
            std::env::var("S3OP_GIT_COMMIT")
                .ok()
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=S3OP_GIT_COMMIT={commit}");

    // Rebuild when HEAD moves (a commit, a checkout), not on every source change. In a worktree
    // HEAD lives in its own git dir and branch refs in the common one. Only existing files are
    // named: cargo reruns a script on every build when a named path is missing.
    let (Some(git_dir), Some(common)) = (
        git(&["rev-parse", "--git-dir"]),
        git(&["rev-parse", "--git-common-dir"]),
    ) else {
        return;
    };
    let mut watched = vec![PathBuf::from(&git_dir).join("HEAD")];
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(PathBuf::from(&common).join(head_ref));
    }
    watched.push(PathBuf::from(&common).join("packed-refs"));
    for path in watched.into_iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
