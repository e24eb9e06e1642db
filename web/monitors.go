package web

// MonitorJobs describes the jobs generated from Prometheus Operator objects
// (--kubernetes.monitors).
type MonitorJobs struct {
	// Sources maps a generated job's name to the object it came from,
	// e.g. "PodMonitor apps/demo".
	Sources map[string]string
	// Rejected are the objects that did not convert, with the reason.
	Rejected []RejectedObject
}

// RejectedObject is a monitor object that produced no job.
type RejectedObject struct {
	Object string `json:"object"`
	Error  string `json:"error"`
}

// monitorJobs returns the generated jobs, empty without monitors.
func (h *Handler) monitorJobs() MonitorJobs {
	if h.opts.Monitors == nil {
		return MonitorJobs{}
	}
	return h.opts.Monitors()
}
