//! The run's options on the command line, made from their one declaration
//! ([`RUN_OPTIONS`]): a flag per option with its help, default and a parser that refuses
//! what the library's own parser refuses, and the values given collected as text for
//! [`run_options_from`](asa_analysis::analysis::run_option::run_options_from).

use clap::builder::PossibleValuesParser;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

use asa_analysis::analysis::run_option::{OptionKind, RunOption, RunValues, RUN_OPTIONS};

/// The run's options given on the command line, as text by option name.
#[derive(Debug, Clone, Default)]
pub struct RunArgs {
    pub given: RunValues,
}

impl RunArgs {
    /// Whether `name` was given.
    pub fn has(&self, name: &str) -> bool {
        self.given.contains_key(name)
    }
}

/// The flag of one option: its help, with its default where it has one.
fn arg(option: &'static RunOption) -> Arg {
    let arg = Arg::new(option.name)
        .long(option.flag())
        .help(option.help)
        .required(false);
    match option.kind {
        OptionKind::Flag => arg.action(ArgAction::SetTrue),
        kind => {
            let arg = match option.default_text() {
                Some(default) => arg.default_value(default),
                None => arg,
            };
            // values are parsed once, by the library (the same words as from Python); clap
            // lists a choice's names
            let arg = match kind {
                OptionKind::Choice(names) => arg
                    .value_parser(PossibleValuesParser::new(names.iter().copied()))
                    .value_name("NAME"),
                OptionKind::Bytes => arg.value_name("BYTES"),
                OptionKind::File => arg.value_name("FILE"),
                _ => arg.value_name(option.name.to_uppercase()),
            };
            arg.action(ArgAction::Set)
        }
    }
}

impl clap::FromArgMatches for RunArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = RunArgs::default();
        args.update_from_arg_matches(matches)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        for option in RUN_OPTIONS {
            // a default is the library's own: only what was typed is a value given
            if matches.value_source(option.name) != Some(ValueSource::CommandLine) {
                continue;
            }
            let text = match option.kind {
                OptionKind::Flag => matches.get_flag(option.name).to_string(),
                _ => matches
                    .get_one::<String>(option.name)
                    .cloned()
                    .unwrap_or_default(),
            };
            self.given.insert(option.name.to_string(), text);
        }
        Ok(())
    }
}

impl clap::Args for RunArgs {
    fn augment_args(cmd: Command) -> Command {
        RUN_OPTIONS
            .iter()
            .fold(cmd, |cmd, option| cmd.arg(arg(option)))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}
