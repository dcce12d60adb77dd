// Package frontend holds what every protocol front-end shares: the REST router and its
// OpenAPI description, TorchServe's REST error shape (the answer of every route outside the
// Open Inference Protocol's and OpenAI's), a request's core.Call from its transport (REST or
// gRPC), the core's kinds as gRPC codes, gRPC's health service, and where a traced
// request's span starts and ends.
//
// Each protocol is a package below it (torchserve, kserve, openai, metrics, webui), a codec
// over one core call (core.Registry.Serve); package daemon wires them to the servers. Nothing
// here admits, batches or counts a request.
package frontend
