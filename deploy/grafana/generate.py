#!/usr/bin/env python3
"""Writes rocewatch-dashboard.json (Grafana 9+, Prometheus data source chosen at import).

Run from this directory: python3 generate.py. The integration tests check that every
metric the dashboard queries is one rocewatch exports (docs/METRICS.md)."""
import json

DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
SEL = 'instance=~"$instance"'

panels = []


def panel(title, exprs, unit="short", kind="timeseries", w=12, h=8, desc="", extra=None):
    n = len(panels)
    panels.append({
        "id": n + 1,
        "type": kind,
        "title": title,
        "description": desc,
        "datasource": DS,
        "gridPos": {"x": (n % 2) * 12 if w == 12 else 0, "y": (n // 2) * h, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["max", "lastNotNull"]}} if kind == "timeseries" else {},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": e, "legendFormat": lf}
            for i, (e, lf) in enumerate(exprs)
        ],
    })
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(panels[-1].get(k), dict):
            panels[-1][k].update(v)
        else:
            panels[-1][k] = v


panel("Ports up", [(f"rdma_port_up_ratio{{{SEL}}}", "{{instance}} {{rdma_device}}/{{rdma_port}}")],
      unit="bool_yes_no", kind="stat", desc="1 when the port is ACTIVE and LinkUp.")
panel("Port throughput", [(f"rdma_port_throughput_bytes_per_second{{{SEL}}} * 8", "{{instance}} {{rdma_device}}/{{rdma_port}} {{network_io_direction}}")],
      unit="bps")
panel("PFC pause ratio per priority", [(f"rdma_pfc_pause_ratio{{{SEL}}}", "{{instance}} {{network_interface_name}} prio {{rdma_priority}} {{network_io_direction}}")],
      unit="percentunit", desc="Fraction of time paused; above 0.2 for a minute is a pause storm (RdmaPfcPauseStorm).")
panel("PFC pause frames", [(f"rate(rdma_pfc_pause_frames_total{{{SEL}}}[$__rate_interval])", "{{instance}} {{network_interface_name}} prio {{rdma_priority}} {{network_io_direction}}")],
      unit="pps")
panel("CNPs (congestion notifications)", [
    (f"rate(rdma_port_cnp_handled_total{{{SEL}}}[$__rate_interval])", "handled {{instance}} {{rdma_device}}/{{rdma_port}}"),
    (f"rate(rdma_port_cnp_sent_total{{{SEL}}}[$__rate_interval])", "sent {{instance}} {{rdma_device}}/{{rdma_port}}"),
], unit="pps")
panel("ECN-marked packets", [(f"rate(rdma_port_ecn_marked_packets_total{{{SEL}}}[$__rate_interval])", "{{instance}} {{rdma_device}}/{{rdma_port}}")],
      unit="pps")
panel("Errors per second", [(f"rdma_port_error_rate_per_second{{{SEL}}}", "{{instance}} {{rdma_device}}/{{rdma_port}}")],
      unit="short")
panel("Drops and retransmissions", [
    (f"rate(rdma_port_out_of_buffer_total{{{SEL}}}[$__rate_interval])", "out_of_buffer {{instance}} {{rdma_device}}/{{rdma_port}}"),
    (f"rate(rdma_port_out_of_sequence_total{{{SEL}}}[$__rate_interval])", "out_of_sequence {{instance}} {{rdma_device}}/{{rdma_port}}"),
    (f"rate(rdma_port_local_ack_timeouts_total{{{SEL}}}[$__rate_interval])", "ack timeouts {{instance}} {{rdma_device}}/{{rdma_port}}"),
], unit="pps")
panel("Probe RTT (p50, p99)", [
    (f"histogram_quantile(0.5, sum by (le, instance, rdma_probe_peer) (rate(rdma_probe_rtt_seconds_bucket{{{SEL}}}[$__rate_interval])))", "p50 {{instance}} -> {{rdma_probe_peer}}"),
    (f"histogram_quantile(0.99, sum by (le, instance, rdma_probe_peer) (rate(rdma_probe_rtt_seconds_bucket{{{SEL}}}[$__rate_interval])))", "p99 {{instance}} -> {{rdma_probe_peer}}"),
], unit="s")
panel("Probe loss", [(f"1 - rate(rdma_probe_received_total{{{SEL}}}[$__rate_interval]) / rate(rdma_probe_sent_total{{{SEL}}}[$__rate_interval])", "{{instance}} -> {{rdma_probe_peer}}")],
      unit="percentunit")
panel("QoS settings differing from the desired state", [(f"rdma_qos_drift{{{SEL}}} == 1", "{{instance}} {{rdma_device}}/{{rdma_port}} {{rdma_qos_setting}}")],
      kind="table", desc="rocewatch qos plan on the host shows the difference.")
panel("Hosts per configuration fingerprint", [("count by (rdma_qos_fingerprint) (rdma_qos_fingerprint)", "{{rdma_qos_fingerprint}}")],
      kind="bargauge", desc="One bar per distinct configuration (settings, drivers, firmware); more than one bar: hosts differ (RdmaConfigDiffersFromMajority).")
panel("Agent: plugin errors and exporter drops", [
    (f"rate(rocewatch_plugin_errors_total{{{SEL}}}[$__rate_interval])", "plugin {{plugin}} {{reason}} {{instance}}"),
    (f"rate(rocewatch_exporter_dropped_total{{{SEL}}}[$__rate_interval])", "dropped {{exporter}} {{instance}}"),
])
panel("Agent: remediation decisions", [(f"increase(rocewatch_remediation_decisions_total{{{SEL}}}[$__range])", "{{action}} {{decision}} {{instance}}")],
      kind="table")

# Where each panel starts, once the half-width ones are placed.
def full_width_y():
    return max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)


y = full_width_y()
panel("Fleet: ToR x ToR probe loss (worst flow, cross-ToR)",
      [('max by (tor, peer_tor) (max_over_time(rdma_probe_fleet_failing_ratio{class="cross_tor",rail=~"$rail"}[5m]))', "")],
      unit="percentunit", kind="table", w=24, h=10,
      desc="Rows: the probers' ToR; columns: the destinations' ToR; cells: the worst share of probes lost by a flow between them over 5 minutes on the rails chosen above (rdma_probe_fleet_failing_ratio, [fleet] in docs/FLEET.md). Empty: nothing failing. A full column is a ToR (or its hosts) unreachable; a row and a column alike, its uplinks; cells everywhere, a spine path. The alerts of configs/prometheus/rocewatch-fleet.rules.yml name the suspect.",
      extra={
          "gridPos": {"x": 0, "y": y},
          "fieldConfig": {"defaults": {
              "unit": "percentunit", "min": 0, "max": 1,
              "custom": {"cellOptions": {"type": "color-background"}},
              "thresholds": {"mode": "absolute", "steps": [
                  {"color": "green", "value": None}, {"color": "orange", "value": 0.01}, {"color": "red", "value": 0.5}]},
          }, "overrides": []},
          "transformations": [{"id": "groupingToMatrix", "options": {"rowField": "tor", "columnField": "peer_tor", "valueField": "Value"}}],
          "targets": [{"refId": "A", "datasource": DS, "expr": 'max by (tor, peer_tor) (max_over_time(rdma_probe_fleet_failing_ratio{class="cross_tor",rail=~"$rail"}[5m]))', "instant": True, "format": "table"}],
      })

y = full_width_y()
FLEET_RAIL = 'rail=~"$rail"'
panel("Fleet: probe loss by rail",
      [(f'sum by (rail) (rate(rdma_probe_fleet_results_total{{outcome=~"timeout|failed",{FLEET_RAIL}}}[$__rate_interval])) / sum by (rail) (rate(rdma_probe_fleet_results_total{{outcome=~"ok|timeout|failed",{FLEET_RAIL}}}[$__rate_interval]))', "rail {{rail}}")],
      unit="percentunit",
      desc="The share of the fleet's probes lost on each rail (timeouts and failed connections; an overloaded host's timeouts and local errors are not loss). One rail above the others: its leaves, or a NIC of that rail; the alerts name the suspect with its rail.",
      extra={"gridPos": {"x": 0, "y": y}})
panel("Fleet: probe RTT p99 by rail",
      [(f'histogram_quantile(0.99, sum by (le, rail) (rate(rdma_probe_fleet_rtt_seconds_bucket{{{FLEET_RAIL}}}[$__rate_interval])))', "rail {{rail}}")],
      unit="s", extra={"gridPos": {"x": 12, "y": y}})

# Congestion (docs/CONGESTION.md).
y = full_width_y()
panel("Congestion: priorities not idle or flowing",
      [(f'rdma_priority_congestion{{{SEL},rdma_congestion_state!~"idle|flowing"}}', "")],
      kind="table", w=24, h=8,
      desc="Each port and priority in a state worth a look, now: ecn_controlled (DCQCN at work), pfc_dominated (pauses outnumber ECN marks: ECN off or marking after PFC), lossy (losses without pauses: not lossless), storm (paused while not draining; RdmaCongestionStorm). rocewatch congestion --advise on the host says what to tune.",
      extra={"gridPos": {"x": 0, "y": y},
             "targets": [{"refId": "A", "datasource": DS, "expr": f'rdma_priority_congestion{{{SEL},rdma_congestion_state!~"idle|flowing"}}', "instant": True, "format": "table"}]})
y = full_width_y()
panel("Congestion hotspots: CNPs sent (top 10 ports)", [("topk(10, rocewatch:port_cnp_sent:rate5m)", "{{instance}} {{rdma_device}}/{{rdma_port}}")],
      desc="Recorded by configs/prometheus/rocewatch.rules.yml; a receiver near line rate sending many CNPs is an incast (RdmaIncast).",
      extra={"gridPos": {"x": 0, "y": y}})
panel("Congestion hotspots: paused by the peer (top 10 priorities)", [("topk(10, rocewatch:priority_paused:max5m)", "{{instance}} {{network_interface_name}} prio {{rdma_priority}}")],
      unit="percentunit", extra={"gridPos": {"x": 12, "y": y}})
panel("Congestion hotspots: discards (top 10 ports and priorities)", [
    ("topk(10, rocewatch:port_discards:rate5m)", "{{instance}} {{network_interface_name}}"),
    ("topk(10, rocewatch:priority_discards:rate5m)", "{{instance}} {{network_interface_name}} prio {{rdma_priority}}"),
],
      extra={"gridPos": {"x": 0, "y": y + 8}})
panel("Congestion states across the fleet", [("rocewatch:priority_congestion:count", "{{rdma_congestion_state}}")],
      extra={"gridPos": {"x": 12, "y": y + 8}})

# Optics and the link's physical layer (docs/OPTICS.md).
y = full_width_y()
NETDEV = "{{instance}} {{network_interface_name}}"
panel("Optics: receive power per lane", [(f"rdma_optics_lane_rx_power_mW{{{SEL}}}", NETDEV + " lane {{rdma_lane}}")],
      unit="mwatt",
      desc="Optical power each lane of a module receives. A lane drifting down is a dirty connector or a bent fiber before the module's low warning (RdmaOpticsRxPowerFalling); a lane at zero beside lit ones is a dark lane (RdmaOpticsDarkLane). rocewatch optics on the host shows the thresholds.",
      extra={"gridPos": {"x": 0, "y": y}})
panel("Optics: module temperature", [(f"rdma_optics_temperature_celsius{{{SEL}}}", NETDEV)],
      unit="celsius", extra={"gridPos": {"x": 12, "y": y}})
panel("Optics: module flags set", [(f"rdma_optics_flag_ratio{{{SEL}}} == 1", "")],
      kind="table", desc="Each alarm, warning or state flag a module has set now (RdmaOpticsFlag); rocewatch doctor (topic optics) says what to do.",
      extra={"gridPos": {"x": 0, "y": y + 8},
             "targets": [{"refId": "A", "datasource": DS, "expr": f"rdma_optics_flag_ratio{{{SEL}}} == 1", "instant": True, "format": "table"}]})
panel("Link: down events and carrier changes", [
    (f"increase(rdma_link_down_events_total{{{SEL}}}[$__rate_interval])", "PHY down " + NETDEV),
    (f"increase(rdma_link_carrier_changes_total{{{SEL}}}[$__rate_interval])", "carrier " + NETDEV),
], desc="The physical link going down as mlx5 counts it (link_down_events_phy: RdmaNetdevLinkFlapping at two in 10 minutes), and carrier changes (a flap is two; they also count ip link set down/up and driver reconfigurations: the alert reads them only where the PHY counter is absent).",
      extra={"gridPos": {"x": 12, "y": y + 8}})
panel("Link: FEC codewords corrected and uncorrectable", [
    (f"rate(rdma_link_fec_corrected_blocks_total{{{SEL}}}[$__rate_interval])", "corrected " + NETDEV),
    (f"rate(rdma_link_fec_uncorrectable_blocks_total{{{SEL}}}[$__rate_interval])", "uncorrectable " + NETDEV),
], desc="Uncorrectable codewords are frames lost on the physical layer (RdmaFecUncorrectable).",
      extra={"gridPos": {"x": 0, "y": y + 16}})
panel("Link: pre-FEC bit error rate", [(f"rate(rdma_link_corrected_bits_total{{{SEL}}}[$__rate_interval]) / on (instance, network_interface_name) rate(rdma_link_received_bits_total{{{SEL}}}[$__rate_interval])", NETDEV)],
      unit="sci", desc="Bits FEC corrected over bits received (mlx5). Above 5e-6 is little margin for RS(528,514) (RdmaPreFecBerHigh, docs/OPTICS.md).",
      extra={"gridPos": {"x": 12, "y": y + 16}})

dashboard = {
    "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}],
    "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "9.0.0"}],
    "uid": "rocewatch-rdma",
    "title": "rocewatch: RDMA / RoCE v2",
    "tags": ["rdma", "roce", "rocewatch"],
    "timezone": "browser",
    "schemaVersion": 39,
    "version": 1,
    "refresh": "30s",
    "time": {"from": "now-1h", "to": "now"},
    "templating": {"list": [{
        "name": "instance", "label": "Host", "type": "query", "datasource": DS,
        "query": {"query": "label_values(rdma_port_up_ratio, instance)", "refId": "instance"},
        "definition": "label_values(rdma_port_up_ratio, instance)",
        "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }, {
        "name": "rail", "label": "Rail", "type": "query", "datasource": DS,
        "query": {"query": "label_values(rdma_fleet_nic_info, rail)", "refId": "rail"},
        "definition": "label_values(rdma_fleet_nic_info, rail)",
        "multi": True, "includeAll": True, "allValue": ".*", "refresh": 2,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }]},
    "annotations": {"list": []},
    "panels": panels,
}

with open("rocewatch-dashboard.json", "w") as f:
    json.dump(dashboard, f, indent=2)
    f.write("\n")
