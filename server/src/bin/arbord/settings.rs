//! The settings of a run: the command line, then the `--config` file for
//! every flag the command line leaves out. Read again on SIGHUP, and
//! compared key by key to say what changed.

use std::ffi::OsString;

use anyhow::Context;
use clap::{ArgMatches, CommandFactory, FromArgMatches};

use crate::args::Args;
use crate::config_file;

pub struct Settings {
    pub args: Args,
    /// What was parsed, for [`Settings::changed`].
    matches: ArgMatches,
}

impl Settings {
    /// The settings of `argv`, whose flags clap has already accepted as
    /// `given` (a bad flag or `--help` ends the process there).
    pub fn read(argv: &[OsString], given: &ArgMatches) -> anyhow::Result<Self> {
        let Some(path) = given.get_one::<std::path::PathBuf>("config") else {
            let args = Args::from_arg_matches(given)?;
            return Ok(Self {
                args,
                matches: given.clone(),
            });
        };
        let command = Args::command();
        let mut all = argv.to_vec();
        all.extend(config_file::arguments(path, &command, given)?);
        let matches = command
            .try_get_matches_from(&all)
            .map_err(|err| config_file::explain(&err, path, given))?;
        let args = Args::from_arg_matches(&matches)?;
        Ok(Self { args, matches })
    }

    /// The settings of `argv` read again (SIGHUP): the file may have
    /// changed.
    pub fn reread(argv: &[OsString]) -> anyhow::Result<Self> {
        let given = Args::command()
            .try_get_matches_from(argv)
            .context("the command line")?;
        Self::read(argv, &given)
    }

    /// The keys whose value differs in `newer`.
    pub fn changed(&self, newer: &Settings) -> Vec<String> {
        let raw = |matches: &ArgMatches, id: &str| -> Option<Vec<OsString>> {
            matches
                .get_raw(id)
                .map(|values| values.map(OsString::from).collect())
        };
        Args::command()
            .get_arguments()
            .filter(|arg| {
                let id = arg.get_id().as_str();
                raw(&self.matches, id) != raw(&newer.matches, id)
            })
            .filter_map(|arg| arg.get_long().map(|long| long.replace('-', "_")))
            .collect()
    }
}
