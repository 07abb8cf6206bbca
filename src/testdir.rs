//! A directory of a unit test's own under the system's temporary directory, emptied when made
//! and removed when dropped, whether the test passed or not: repeated runs leave nothing
//! behind.
use std::ops::Deref;
use std::path::{Path, PathBuf};

pub(crate) struct TestDir(PathBuf);

impl TestDir {
    /// `<tmp>/picolet-<tag>-<pid>-<thread>`: apart for each test running at once.
    pub(crate) fn new(tag: &str) -> TestDir {
        let id = format!("{:?}", std::thread::current().id());
        let id: String = id.chars().filter(char::is_ascii_digit).collect();
        let d = std::env::temp_dir().join(format!("picolet-{tag}-{}-{id}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
        TestDir(d)
    }
}

impl Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::TestDir;

    #[test]
    fn is_made_empty_and_removed_when_dropped() {
        let path = {
            let d = TestDir::new("testdir");
            assert!(d.is_dir());
            assert_eq!(std::fs::read_dir(&*d).unwrap().count(), 0);
            std::fs::create_dir_all(d.join("a/b")).unwrap();
            std::fs::write(d.join("a/b/c"), "x").unwrap();
            d.to_path_buf()
        };
        assert!(!path.exists(), "{} is left", path.display());
        let again = TestDir::new("testdir");
        assert_eq!(*again, *path, "one name for one test thread");
    }
}
