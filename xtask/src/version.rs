//! The release version lives in Cargo.toml alone (`s3_operator::VERSION`): every hand-written file
//! that must name it gets its version rewritten from there, so a release bumps one line and runs
//! `cargo xtask generate`. The CSV and bundle.Dockerfile take it when they are generated.

use std::collections::BTreeMap;
use std::path::Path;

use crate::{Error, Generated, read, shape};

/// Where the version appears: a file, and the text the version follows in it. `^` anchors the
/// marker at the start of an unindented line (a top-level key, not a nested one). Every marker must occur at least once,
/// so a line that is reworded is not silently left behind.
const PINS: &[(&str, &str)] = &[
    ("charts/s3-operator/Chart.yaml", "^version: "),
    ("charts/s3-operator/Chart.yaml", "^appVersion: \""),
    // The Artifact Hub image annotation.
    (
        "charts/s3-operator/Chart.yaml",
        "ghcr.io/s3-operator/s3-operator:",
    ),
    (
        "config/manager/manager.yaml",
        "ghcr.io/s3-operator/s3-operator:",
    ),
    ("Dockerfile", "ghcr.io/s3-operator/s3-operator:"),
    ("Dockerfile", "VERSION="),
];

/// Every file of `PINS` with its version set to the crate's.
pub fn files(root: &Path) -> Result<Vec<Generated>, Error> {
    let mut by_path: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (path, marker) in PINS {
        by_path.entry(path).or_default().push(marker);
    }
    by_path
        .into_iter()
        .map(|(path, markers)| {
            let mut text = read(root, path)?;
            for marker in markers {
                text = pin(&text, marker, s3_operator::VERSION)
                    .ok_or_else(|| shape(path, format!("names no version after `{marker}`")))?;
            }
            Ok(Generated {
                path: path.into(),
                text,
            })
        })
        .collect()
}

/// `text` with the version after every occurrence of `marker` replaced by `version`; None when
/// the marker is nowhere.
fn pin(text: &str, marker: &str, version: &str) -> Option<String> {
    let (anchored, marker) = match marker.strip_prefix('^') {
        Some(m) => (true, m),
        None => (false, marker),
    };
    let mut found = false;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let starts = if anchored {
            line.starts_with(marker).then_some(0)
        } else {
            line.find(marker)
        };
        let Some(at) = starts else {
            out.push_str(line);
            continue;
        };
        found = true;
        let from = at + marker.len();
        let len = line[from..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')))
            .unwrap_or(line.len() - from);
        out.push_str(&line[..from]);
        out.push_str(version);
        out.push_str(&line[from + len..]);
    }
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_rewrites_every_version_after_the_marker_and_only_there() {
        let text =
            "version: 0.0.1\nappVersion: \"0.0.1\"\nkubeVersion: \">=1.28\"\n  version: v1\n";
        assert_eq!(
            pin(text, "^version: ", "1.2.3").unwrap(),
            "version: 1.2.3\nappVersion: \"0.0.1\"\nkubeVersion: \">=1.28\"\n  version: v1\n"
        );
        assert_eq!(
            pin(text, "^appVersion: \"", "1.2.3-rc.1").unwrap(),
            "version: 0.0.1\nappVersion: \"1.2.3-rc.1\"\nkubeVersion: \">=1.28\"\n  version: v1\n"
        );
        assert_eq!(
            pin("  image: repo:0.0.1 # pinned\n", "repo:", "2.0.0").unwrap(),
            "  image: repo:2.0.0 # pinned\n"
        );
        assert!(pin(text, "^image: ", "1.2.3").is_none());
    }

    /// Each pinned version set back to another one, alone: generating puts the crate's back, so
    /// the committed file is reported stale.
    #[test]
    fn a_version_that_is_not_cargo_tomls_is_drift() {
        let root = crate::repo();
        let tmp = std::env::temp_dir().join(format!("xtask-version-{}", std::process::id()));
        for (path, _) in PINS {
            std::fs::create_dir_all(tmp.join(path).parent().unwrap()).unwrap();
            std::fs::copy(root.join(path), tmp.join(path)).unwrap();
        }
        for (path, marker) in PINS {
            let original = read(&root, path).unwrap();
            let stale = pin(&original, marker, "0.0.9").unwrap();
            assert_ne!(stale, original, "{path} {marker}");
            std::fs::write(tmp.join(path), &stale).unwrap();
            let generated = files(&tmp).unwrap();
            std::fs::write(tmp.join(path), &original).unwrap();
            let g = generated.iter().find(|g| g.path == *path).unwrap();
            assert_eq!(g.text, original, "{path} {marker}");
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
