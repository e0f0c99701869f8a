//! `reel man DIR`: the manual pages, generated from the command line's own definition (so they
//! never drift from `--help`): `reel.1` and one page per subcommand (`reel-jobs-list.1`, …).
//! The packages run it at build time; it is hidden from `--help`.

use std::path::Path;

use clap::CommandFactory;

use crate::cli::Cli;

/// Write `reel.1` and a page per subcommand into `dir`; returns the files written.
pub fn write_pages(dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    let mut cmd = Cli::command();
    cmd.build();
    write_page(&cmd, "reel", dir, &mut written)?;
    Ok(written)
}

fn write_page(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut Vec<std::path::PathBuf>,
) -> std::io::Result<()> {
    // clap's generated `help` subcommands repeat the other pages.
    if cmd.is_hide_set() || cmd.get_name() == "help" {
        return Ok(());
    }
    let page = cmd.clone().name(name.to_string());
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    let file = dir.join(format!("{name}.1"));
    std::fs::write(&file, out)?;
    written.push(file);
    for sub in cmd.get_subcommands() {
        write_page(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_visible_command_has_a_page() {
        let dir = tempfile::tempdir().unwrap();
        let pages = super::write_pages(dir.path()).unwrap();
        let names: Vec<String> = pages
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for want in [
            "reel.1",
            "reel-archive.1",
            "reel-jobs-list.1",
            "reel-plugin-check.1",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} missing: {names:?}");
        }
        assert!(!names.iter().any(|n| n == "reel-man.1"), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
        let page = std::fs::read_to_string(dir.path().join("reel-plugin-check.1")).unwrap();
        assert!(
            page.contains(".TH") && page.contains("DESTRUCTIVE"),
            "{page}"
        );
    }
}
