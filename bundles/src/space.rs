//! Free-space check before packing: fail early rather than fill the disk.

use std::path::Path;

use crate::pack::PackError;

const BLOCK: u64 = 512;

/// Bytes free for unprivileged users on the filesystem holding `dir`.
pub(crate) fn available(dir: &Path) -> Result<u64, PackError> {
    let st = rustix::fs::statvfs(dir).map_err(|errno| PackError::FreeSpace {
        dir: dir.to_owned(),
        source: errno.into(),
    })?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Fails with [`PackError::NoSpace`] when `needed > available`.
pub(crate) fn ensure(dir: &Path, needed: u64, available: u64) -> Result<(), PackError> {
    if needed > available {
        return Err(PackError::NoSpace {
            dir: dir.to_owned(),
            needed,
            available,
        });
    }
    Ok(())
}

/// Upper bound of the `.tar.zst` size for entries given as `(path length, content size)`:
/// a header, a GNU long-name entry and padded content per entry, the end marker, then zstd's
/// worst-case expansion of incompressible input.
pub(crate) fn upper_bound(entries: impl IntoIterator<Item = (usize, u64)>) -> u64 {
    let tar = entries
        .into_iter()
        .fold(2 * BLOCK, |total, (path_len, size)| {
            let name = 2 * BLOCK + round_up(path_len as u64 + 2);
            total.saturating_add(name).saturating_add(round_up(size))
        });
    // ZSTD_compressBound is about n + n/256 + 128 KiB per frame; leave twice that margin.
    tar.saturating_add(tar / 128).saturating_add(256 * 1024)
}

fn round_up(n: u64) -> u64 {
    n.div_ceil(BLOCK).saturating_mul(BLOCK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_needed_with_available() {
        let dir = Path::new("/out");
        assert!(ensure(dir, 10, 10).is_ok());
        assert!(ensure(dir, 0, 0).is_ok());
        let err = ensure(dir, 11, 10).expect_err("too small");
        assert_eq!(
            err.to_string(),
            "Not enough free space in `/out`: need 11 bytes, 10 available"
        );
    }

    #[test]
    fn bounds_the_output() {
        let small = upper_bound([(10, 1)]);
        assert!(small >= 4 * BLOCK, "{small}");
        let big = upper_bound([(300, 10_000_000), (5, 0)]);
        assert!(big > 10_000_000 + 10_000_000 / 256, "{big}");
        assert_eq!(upper_bound([(1, u64::MAX)]), u64::MAX);
    }

    #[test]
    fn reads_free_space() {
        let free = available(Path::new(".")).expect("statvfs");
        assert!(free > 0);
        assert!(matches!(
            available(Path::new("/nonexistent/kubexm")),
            Err(PackError::FreeSpace { .. })
        ));
    }
}
