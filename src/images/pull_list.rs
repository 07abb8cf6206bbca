//! Lists of images to pull, beside the archives in the preload directory: every `*.txt` file
//! holds one image reference a line; blank lines and comments (from `#` to the end of the line)
//! are ignored. Each image is pulled through the CRI with the node's credentials when picolet
//! starts and when its list changes (an image already present is not pulled again), then pinned
//! like a preloaded one. A failed pull is retried with the backoff of [`crate::retry`], its log
//! kept to the first failure, a changed cause, a summary every 10 minutes and the recovery.

use std::path::{Path, PathBuf};

/// One reference of a list: as written, and as the runtime stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub reference: String,
    pub normalized: String,
    /// The list and the line (from 1) naming it.
    pub file: PathBuf,
    pub line: usize,
}

/// The references of list `file` (its text), and a message per line that is not one, naming
/// the file, the line and the value.
pub fn parse(file: &Path, text: &str) -> (Vec<Wanted>, Vec<String>) {
    let mut wanted = Vec::new();
    let mut errors = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        match super::archive::normalize(line) {
            Some(normalized) if valid(line) => wanted.push(Wanted {
                reference: line.to_owned(),
                normalized,
                file: file.to_path_buf(),
                line: i + 1,
            }),
            _ => errors.push(format!(
                "image pull list {} line {}: {line:?} is not an image reference \
                 (registry/name:tag or name@sha256:<digest>, one a line)",
                file.display(),
                i + 1
            )),
        }
    }
    (wanted, errors)
}

/// The characters a reference may have, with a digest (if any) of the form `sha256:<64 hex>`.
fn valid(r: &str) -> bool {
    let chars_ok = r
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@'));
    let digest_ok = match r.split_once('@') {
        None => true,
        Some((_, d)) => d.strip_prefix("sha256:").is_some_and(|h| {
            h.len() == 64
                && h.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        }),
    };
    chars_ok && digest_ok && !r.starts_with(['/', ':', '@', '.', '-'])
}

/// The lists of `dir`, in name order (hidden files left alone).
pub fn lists(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            !n.starts_with('.')
                && n.ends_with(".txt")
                && e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink())
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reference_a_line_comments_and_blank_lines_ignored() {
        let f = Path::new("/i/images.txt");
        let digest = format!("sha256:{}", "0f".repeat(32));
        let text = format!(
            "# the fleet's images\n\
             \n\
             registry.local:5000/app:1.4\n   busybox   # the shell\n\
             quay.io/org/tool@{digest}\n\
             two words\n\
             ::bad\n\
             app@sha256:short\n"
        );
        let (wanted, errors) = parse(f, &text);
        let got: Vec<(&str, &str, usize)> = wanted
            .iter()
            .map(|w| (w.reference.as_str(), w.normalized.as_str(), w.line))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "registry.local:5000/app:1.4",
                    "registry.local:5000/app:1.4",
                    3
                ),
                ("busybox", "docker.io/library/busybox:latest", 4),
                (
                    &*format!("quay.io/org/tool@{digest}"),
                    &*format!("quay.io/org/tool@{digest}"),
                    5
                ),
            ]
        );
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert_eq!(
            errors[0],
            "image pull list /i/images.txt line 6: \"two words\" is not an image reference \
             (registry/name:tag or name@sha256:<digest>, one a line)"
        );
        assert!(errors[1].contains("line 7: \"::bad\""), "{errors:?}");
        assert!(
            errors[2].contains("line 8: \"app@sha256:short\""),
            "{errors:?}"
        );
    }

    #[test]
    fn lists_in_name_order_hidden_ones_left_alone() {
        let dir = std::env::temp_dir().join(format!("picolet-pull-lists-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("d.txt")).unwrap();
        for f in ["b.txt", "a.txt", ".c.txt", "app.tar"] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let names: Vec<String> = lists(&dir)
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.txt", "b.txt"]);
        assert!(lists(&dir.join("missing")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
