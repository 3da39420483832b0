// Package wire holds the shapes of the API dialects Sluice speaks that
// more than one party writes or reads: the gateway answering its clients,
// the pipeline reading a provider, the mock provider answering the tests.
// It imports nothing, so a provider stand-in may use it.
package wire

// OpenAIError is OpenAI's error body: what the /v1 API answers and what
// OpenAI-compatible providers send, so SDKs read our failures as theirs.
type OpenAIError struct {
	Error OpenAIErrorDetail `json:"error"`
}

// OpenAIErrorDetail is the error inside an OpenAIError.
type OpenAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}
