package metrics

// TenantRequest counts a request or tunnel of a tenant. The tenant is a
// name from the config (the proxy never takes it from a request), so the
// label's values are bounded by the config; "" is not counted.
func (m *Metrics) TenantRequest(tenant, verdict, code string) {
	if m == nil || tenant == "" {
		return
	}
	if c, err := m.tenants.GetMetricWithLabelValues(tenant, verdict, code); err == nil {
		c.Inc()
	}
}
