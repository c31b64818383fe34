// Package keda runs KEDA's own code (github.com/kedacore/keda/v2, from its released module)
// against a real broker and a running sluice-lag: its kafka scaler's arithmetic against
// Sluice's engine (`sluice-lag simulate keda-kafka`), and its external-scaler client against
// sluice-lag's external scaler, so the wire contract is KEDA's.
package keda
