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
	ctx, caller, sink := c.Request.Context(), callerOf(c), httpSink{c}
	req, err := a.readEmbeddingsRequest(c)
	if err != nil {
		// A malformed request still costs one request (and a frozen token
		// hears that it is frozen).
		if aerr := a.Pipeline.Admit(ctx, caller, requestID(c), sink); aerr != nil {
			err = aerr
		}
		a.fail(c, err)
		return
	}
	served, err := a.Pipeline.Complete(ctx, caller, &req, sink)
	if err != nil {
		a.fail(c, err)
		return
	}
	c.Set(servedKey, served)
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
