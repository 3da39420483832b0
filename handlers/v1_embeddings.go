package handlers

import (
	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/completion"
)

// embeddings answers POST /v1/embeddings through the pipeline, as chat
// completions are answered: the same buckets, budget, settlement and
// metering, with the inputs as the prompt and nothing to generate. Only
// X-Sluice-Priority of the gateway's headers applies (no conversations,
// no response cache, no async jobs: a batch queues embeddings).
func (a *api) embeddings(c *gin.Context) {
	a.complete(c, a.readEmbeddingsRequest)
}

// readEmbeddingsRequest reads and parses an embeddings request, every
// kind of bad input a 400 or 413 that says what is wrong.
func (a *api) readEmbeddingsRequest(c *gin.Context) (completion.Request, error) {
	body, err := a.readBody(c)
	if err != nil {
		return completion.Request{}, err
	}
	req, err := a.Pipeline.ParseEmbeddings(body)
	if err != nil {
		return req, err
	}
	req.ID = requestID(c)
	req.Priority = c.GetHeader("X-Sluice-Priority")
	return req, nil
}
