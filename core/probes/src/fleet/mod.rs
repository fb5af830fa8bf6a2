//! Fleet probing (`[fleet]`): the peers are this host's pinglist from the fleet's map
//! ([`config`]: the section, where the map comes from, [`FleetView`]), each probed on
//! several flows with their own UDP source ports ([`flows`]) in rounds of their own
//! ([`rounds`]), and the results are counted per host by class, path and outcome, with
//! the failing flows only while they fail ([`stats`]); timeouts while this host is
//! overloaded are its own ([`noise`]). [`simulate`] runs the same round and statistics
//! code for every host of a simulated fleet. [`map`] keeps the map fresh: this host's rows
//! (LLDP or the topology file), exported; the map; the view handed to the prober, each
//! rail on the port the one rail map gives it ([`rails`]).

mod config;
pub mod flows;
pub mod map;
pub mod noise;
pub mod rails;
mod rounds;
pub mod simulate;
pub mod stats;

pub use config::{
    fetch_prometheus, view_of, view_of_list, view_on_ports, FleetConfig, FleetSource, FleetView,
    Probing, MAX_TOP_FAILING,
};
pub use rounds::{count_round, round_samples, run_fleet, targets, FlowSet, RttAttrs};
