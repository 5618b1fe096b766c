package agent

import "github.com/reclaimnet/reclaimnet/mesh"

// meshTelemetryReport is a report with bandwidth to the node's own building
// (physics) and to another one.
func meshTelemetryReport(local, remote float64) mesh.Telemetry {
	return mesh.Telemetry{FreeGPUs: 2, Bandwidth: []mesh.BuildingBandwidth{
		{Building: "physics", Available: local, AvailableLow: local / 2},
		{Building: "chemistry", Available: remote, AvailableLow: remote / 2},
	}}
}
