package handlers

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"github.com/sluicehq/sluice/internal/csptest"
	"github.com/sluicehq/sluice/internal/testdb"
	"github.com/sluicehq/sluice/models"
)

// The roles of the route table, in the order each route is called: the
// strangers first, so every refusal is checked before organization A's
// own successful calls change anything. The admin is a stranger to A's
// data outside the admin routes: Sluice's admins run Sluice, not its
// customers' accounts.
var tenantRoles = [...]string{"anonymous", "memberB", "ownerB", "admin", "memberA", "ownerA"}

// statuses lists a route's expected status per role, in tenantRoles order.
type statuses [len(tenantRoles)]int

func st(anonymous, memberB, ownerB, admin, memberA, ownerA int) statuses {
	return statuses{anonymous, memberB, ownerB, admin, memberA, ownerA}
}

// The usual rows of statuses.
func anyone(s int) statuses       { return st(s, s, s, s, s, s) }
func signedIn(s int) statuses     { return st(401, s, s, s, s, s) }         // any session or token
func signedInPage(s int) statuses { return st(303, s, s, s, s, s) }         // any signed-in visitor
func adminAPI(s int) statuses     { return st(401, 403, 403, s, 403, 403) } // /api/admin
func adminPage(s int) statuses    { return st(303, 403, 403, s, 403, 403) } // /admin pages
func ownerOnly(s int) statuses    { return st(401, 403, s, s, 403, s) }     // an owner's setting

// namesA is a route naming A's data: a 404 to everyone else.
func namesA(memberA, ownerA int) statuses { return st(401, 404, 404, 404, memberA, ownerA) }

// pageNamesA is a page naming A's data: a 404 page to everyone else.
func pageNamesA(memberA, ownerA int) statuses { return st(303, 404, 404, 404, memberA, ownerA) }

// routeRow is one registered route: a request to it naming A's data where
// it names anything, and the status each role gets.
type routeRow struct {
	method, route string // as registered on the router
	path          string // what is requested; {ids} are filled in from the fixture
	body          string // JSON for /v1 and /api; {role} becomes the caller's role, {ids} A's ids
	form          url.Values
	upload        string // a file to upload as multipart/form-data, with purpose batch
	want          statuses
	// ownedByA marks a path naming A's data: strangers must change nothing.
	ownedByA bool
	// fresh calls with a new sign-in of the role: the route ends or
	// replaces the session it is called with.
	fresh bool
}

// unknownLink is shaped like a one-time link's token and opens none.
const unknownLink = "lnk_AAAAAAAAAAAAAAAAAAAAAAAAAA"

// routeTable is every route Sluice serves. A route added to the router
// without a row here fails TestRouteRoleTenantTable: decide who may call
// it, and whether it names a tenant's data.
func routeTable() []routeRow {
	chat := `{"model":"sluice-local","messages":[{"role":"user","content":"a couplet for {role}"}]}`
	return []routeRow{
		{method: "GET", route: "/healthz", want: anyone(200)},
		{method: "GET", route: "/readyz", want: anyone(200)},

		{method: "POST", route: "/v1/chat/completions", body: chat, want: signedIn(200)},
		{method: "POST", route: "/v1/embeddings", body: `{"model":"sluice-local","input":"{role}"}`, want: signedIn(200)},
		{method: "GET", route: "/v1/models", want: signedIn(200)},
		{method: "POST", route: "/v1/messages", body: `{"model":"sluice-local","max_tokens":50,"messages":[{"role":"user","content":"a couplet for {role}"}]}`, want: signedIn(200)},
		{method: "POST", route: "/v1/messages/count_tokens", body: `{"model":"sluice-local","messages":[{"role":"user","content":"a couplet for {role}"}]}`, want: signedIn(200)},
		// Conversations belong to a token: A's member, with another of A's tokens, does not see the owner's.
		{method: "GET", route: "/v1/sessions/:id", path: "/v1/sessions/{conversation}", want: namesA(404, 200), ownedByA: true},
		{method: "DELETE", route: "/v1/sessions/:id", path: "/v1/sessions/{conversation}", want: namesA(404, 200), ownedByA: true},
		// Stored responses belong to the organization: A's member reads the owner's.
		{method: "POST", route: "/v1/responses", body: `{"model":"sluice-local","input":"a couplet for {role}"}`, want: signedIn(200)},
		{method: "GET", route: "/v1/responses/:id", path: "/v1/responses/{response}", want: namesA(200, 200), ownedByA: true},
		{method: "DELETE", route: "/v1/responses/:id", path: "/v1/responses/{responseToDelete}", want: namesA(200, 404), ownedByA: true},
		{method: "POST", route: "/v1/jobs", body: chat, want: signedIn(202)},
		{method: "GET", route: "/v1/jobs", want: signedIn(200)},
		{method: "GET", route: "/v1/jobs/:id", path: "/v1/jobs/{job}", want: namesA(200, 200), ownedByA: true},
		{method: "DELETE", route: "/v1/jobs/:id", path: "/v1/jobs/{job}", want: namesA(200, 409), ownedByA: true},

		// OpenAI's Batch API. Creating a batch names a file in its body: A's file is not B's to use.
		{method: "POST", route: "/v1/files", upload: "{\"custom_id\":\"r-{role}\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":" + chat + "}\n", want: signedIn(200)},
		{method: "GET", route: "/v1/files", want: signedIn(200)},
		{method: "GET", route: "/v1/files/:id", path: "/v1/files/{file}", want: namesA(200, 200), ownedByA: true},
		{method: "GET", route: "/v1/files/:id/content", path: "/v1/files/{file}/content", want: namesA(200, 200), ownedByA: true},
		{method: "DELETE", route: "/v1/files/:id", path: "/v1/files/{fileToDelete}", want: namesA(200, 404), ownedByA: true},
		{method: "POST", route: "/v1/batches", body: `{"input_file_id":"{file}","endpoint":"/v1/chat/completions","completion_window":"24h"}`,
			want: namesA(200, 200), ownedByA: true},
		{method: "GET", route: "/v1/batches", want: signedIn(200)},
		{method: "GET", route: "/v1/batches/:id", path: "/v1/batches/{batch}", want: namesA(200, 200), ownedByA: true},
		{method: "POST", route: "/v1/batches/:id/cancel", path: "/v1/batches/{batch}/cancel", want: namesA(200, 200), ownedByA: true},

		{method: "POST", route: "/api/auth/signup", body: `{"email":"{role}@signup.example","password":"password123","organization":"New {role}"}`, want: anyone(201)},
		{method: "POST", route: "/api/auth/login", body: `{"email":"login@quokka.example","password":"password123"}`, want: anyone(200)},
		{method: "POST", route: "/api/auth/logout", want: signedIn(204), fresh: true},
		// Passwords and addresses: anyone may ask for a reset (the same answer for every address) and use a link; these
		// links are unknown. A user's own account names no tenant; a wrong current password changes nothing.
		{method: "POST", route: "/api/auth/password-reset", body: `{"email":"{role}@reset.example"}`, want: anyone(202)},
		{method: "POST", route: "/api/auth/password-reset/confirm", body: `{"token":"` + unknownLink + `","new_password":"password123"}`, want: anyone(404)},
		{method: "POST", route: "/api/auth/verify-email", body: `{"token":"` + unknownLink + `"}`, want: anyone(404)},
		{method: "GET", route: "/api/account", want: signedIn(200)},
		{method: "PUT", route: "/api/account/password", body: `{"current_password":"not-the-password","new_password":"password456"}`, want: signedIn(403)},
		// Without mail there is no link to send.
		{method: "POST", route: "/api/account/verification", want: signedIn(409)},
		{method: "POST", route: "/api/tokens", body: `{"name":"{role}'s"}`, want: signedIn(201)},
		{method: "GET", route: "/api/tokens", want: signedIn(200)},
		// A token's controls: an owner changes any of the organization's, a member only the ones they created (this one is the owner's).
		{method: "PATCH", route: "/api/tokens/:id", path: "/api/tokens/{tokenToEdit}", body: `{"requests_per_minute":10,"models":["sluice-local"]}`,
			want: namesA(403, 200), ownedByA: true},
		// The owner's tokens: A's member may change only their own (handler tests show they may).
		{method: "DELETE", route: "/api/tokens/:id", path: "/api/tokens/{tokenToRevoke}", want: namesA(403, 200), ownedByA: true},
		{method: "PUT", route: "/api/tokens/:id/signing", path: "/api/tokens/{tokenToSign}/signing", body: `{"required":true}`, want: namesA(403, 200), ownedByA: true},
		{method: "GET", route: "/api/usage", want: signedIn(200)},
		{method: "GET", route: "/api/usage/series", want: signedIn(200)},
		{method: "GET", route: "/api/freezes", want: signedIn(200)},
		{method: "GET", route: "/api/budget", want: signedIn(200)},
		{method: "PUT", route: "/api/budget", body: `{"monthly_limit":"10.00","hard_stop":true}`, want: ownerOnly(200)},
		{method: "GET", route: "/api/balance", want: signedIn(200)},
		{method: "PUT", route: "/api/balance", body: `{"low_balance_threshold":"1.00"}`, want: ownerOnly(200)},
		{method: "POST", route: "/api/balance/redeem", body: `{"code":"rc_NOTACODE"}`, want: signedIn(404)},
		{method: "PUT", route: "/api/organization", body: `{"time_zone":"Europe/Paris"}`, want: ownerOnly(200)},
		{method: "GET", route: "/api/invoices", want: signedIn(200)},
		{method: "GET", route: "/api/invoices/:id", path: "/api/invoices/{invoice}", want: namesA(200, 200), ownedByA: true},
		{method: "GET", route: "/api/invoices/:id/csv", path: "/api/invoices/{invoice}/csv", want: namesA(200, 200), ownedByA: true},
		// Upgrades are the owners'; one pending request per organization; the admin's is on premium already.
		{method: "GET", route: "/api/upgrade-requests", want: ownerOnly(200)},
		{method: "POST", route: "/api/upgrade-requests", body: `{"tier":"premium","note":"{role}"}`, want: st(401, 403, 409, 422, 403, 409)},
		// Payments are off here (no Stripe): owners are told so, members may not.
		{method: "GET", route: "/api/payments", want: signedIn(200)},
		{method: "POST", route: "/api/payments/top-ups", body: `{"amount":"25.00"}`, want: st(401, 403, 422, 422, 403, 422)},
		{method: "POST", route: "/api/payments/subscriptions", body: `{"tier":"premium"}`, want: st(401, 403, 422, 422, 403, 422)},
		{method: "POST", route: "/api/payments/portal", want: st(401, 403, 422, 422, 403, 422)},
		{method: "PUT", route: "/api/payments/auto-recharge", body: `{"threshold":null,"amount":null}`, want: st(401, 403, 422, 422, 403, 422)},
		// Authenticated by Stripe's signature alone; off without Stripe.
		{method: "POST", route: "/webhooks/stripe", body: `{}`, want: anyone(404)},

		// Teams. Everyone in an organization reads its members; owners manage them and invite.
		{method: "GET", route: "/api/organizations", want: signedIn(200)},
		{method: "PUT", route: "/api/session/organization", body: `{"id":{orgA}}`, want: namesA(200, 200), ownedByA: true},
		{method: "GET", route: "/api/organization/members", want: signedIn(200)},
		{method: "PUT", route: "/api/organization/members/:user_id", path: "/api/organization/members/{secondOwnerA}", body: `{"role":"member"}`,
			want: st(401, 403, 404, 404, 403, 200), ownedByA: true},
		{method: "DELETE", route: "/api/organization/members/:user_id", path: "/api/organization/members/{leavingA}",
			want: st(401, 403, 404, 404, 403, 200), ownedByA: true},
		{method: "POST", route: "/api/organization/invitations", body: `{"email":"{role}@invited.example","role":"member"}`, want: ownerOnly(201)},
		{method: "GET", route: "/api/organization/invitations", want: ownerOnly(200)},
		{method: "DELETE", route: "/api/organization/invitations/:id", path: "/api/organization/invitations/{invitationToRevoke}",
			want: st(401, 403, 404, 404, 403, 200), ownedByA: true},
		// Capybara invites A's owner: only that address may accept.
		{method: "POST", route: "/api/invitations/:code/accept", path: "/api/invitations/{invitationForOwnerA}/accept", want: st(401, 403, 403, 403, 403, 200)},

		{method: "GET", route: "/api/admin/tiers", want: adminAPI(200)},
		// Without mail the admin is given the reset link to pass on.
		{method: "POST", route: "/api/admin/users/:id/password-reset", path: "/api/admin/users/{secondOwnerA}/password-reset", want: adminAPI(201)},
		{method: "POST", route: "/api/admin/tiers", body: `{"name":"tier-{role}","capacity":5,"refill_per_sec":1}`, want: adminAPI(201)},
		{method: "PUT", route: "/api/admin/tiers/:name", path: "/api/admin/tiers/free", body: `{"capacity":30}`, want: adminAPI(200)},
		{method: "DELETE", route: "/api/admin/tiers/:name", path: "/api/admin/tiers/spare-api", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/prices", want: adminAPI(200)},
		{method: "PUT", route: "/api/admin/prices/*model", path: "/api/admin/prices/gpt-4o-mini",
			body: `{"input_per_mtok":"0.15","output_per_mtok":"0.60","cached_input_per_mtok":"0.075"}`, want: adminAPI(200)},
		{method: "GET", route: "/api/admin/upgrade-requests", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/upgrade-requests/:id/approve", path: "/api/admin/upgrade-requests/{upgradeA}/approve", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/upgrade-requests/:id/decline", path: "/api/admin/upgrade-requests/{upgradeB}/decline", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/organizations", want: adminAPI(200)},
		{method: "PUT", route: "/api/admin/organizations/:id/tier", path: "/api/admin/organizations/{orgA}/tier", body: `{"tier":"free"}`, want: adminAPI(200)},
		{method: "GET", route: "/api/admin/organizations/:id/export", path: "/api/admin/organizations/{orgA}/export", want: adminAPI(200)},
		{method: "DELETE", route: "/api/admin/organizations/:id", path: "/api/admin/organizations/{orgToDelete}", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/users", path: "/api/admin/users?q=aardvark", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/users/:id/disable", path: "/api/admin/users/{userToDisable}/disable", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/users/:id/enable", path: "/api/admin/users/{userToEnable}/enable", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/organizations/:id/balance-adjustments", path: "/api/admin/organizations/{orgA}/balance-adjustments",
			body: `{"amount":"1.00","reason":"the table"}`, want: adminAPI(201)},
		{method: "GET", route: "/api/admin/redeem-codes", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/redeem-codes", body: `{"amount":"1.00"}`, want: adminAPI(201)},
		{method: "GET", route: "/api/admin/audit", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/freezes", want: adminAPI(200)},
		{method: "DELETE", route: "/api/admin/freezes/:id", path: "/api/admin/freezes/{freezeAPI}", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/tuning", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/limiter", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/upstreams", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/upstreams", body: `{"name":"key-{role}","base_url":"https://api.example.com/v1","api_key":"sk-upstream-{role}"}`, want: adminAPI(201)},
		{method: "DELETE", route: "/api/admin/upstreams/:id", path: "/api/admin/upstreams/{upstreamAPI}", want: adminAPI(200)},
		{method: "GET", route: "/api/admin/aliases", want: adminAPI(200)},
		{method: "POST", route: "/api/admin/aliases", body: `{"name":"alias-{role}","targets":[{"model":"sluice-local"}]}`, want: adminAPI(201)},
		{method: "PUT", route: "/api/admin/aliases/:name", path: "/api/admin/aliases/alias-api", body: `{"fallbacks":["sluice-local"]}`, want: adminAPI(200)},
		{method: "DELETE", route: "/api/admin/aliases/:name", path: "/api/admin/aliases/alias-api-gone", want: adminAPI(200)},

		{method: "GET", route: "/static/*filepath", path: "/static/sluice.css", want: anyone(200)},
		{method: "HEAD", route: "/static/*filepath", path: "/static/sluice.css", want: anyone(200)},
		{method: "GET", route: "/", want: anyone(303)},
		{method: "GET", route: "/login", want: anyone(200)},
		{method: "POST", route: "/login", form: url.Values{"email": {"login@quokka.example"}, "password": {"password123"}}, want: anyone(303), fresh: true},
		{method: "GET", route: "/signup", want: anyone(200)},
		{method: "POST", route: "/signup", form: url.Values{"email": {"{role}@pagesignup.example"}, "password": {"password123"}, "organization": {"Page {role}"}},
			want: anyone(303), fresh: true},
		{method: "POST", route: "/logout", form: url.Values{}, want: anyone(303), fresh: true},
		{method: "GET", route: "/password-reset", want: anyone(200)},
		{method: "POST", route: "/password-reset", form: url.Values{"email": {"{role}@pagereset.example"}}, want: anyone(202)},
		{method: "GET", route: "/password-reset/:token", path: "/password-reset/" + unknownLink, want: anyone(200)},
		{method: "POST", route: "/password-reset/:token", path: "/password-reset/" + unknownLink, form: url.Values{"new_password": {"password456"}}, want: anyone(404)},
		{method: "GET", route: "/verify-email/:token", path: "/verify-email/" + unknownLink, want: anyone(200)},
		{method: "POST", route: "/verify-email/:token", path: "/verify-email/" + unknownLink, form: url.Values{}, want: anyone(404)},
		{method: "GET", route: "/account", want: signedInPage(200)},
		{method: "POST", route: "/account/password", form: url.Values{"current_password": {"not-the-password"}, "new_password": {"password456"}},
			want: st(303, 403, 403, 403, 403, 403)},
		{method: "POST", route: "/account/verification", form: url.Values{}, want: st(303, 409, 409, 409, 409, 409)},
		{method: "GET", route: "/dashboard", want: signedInPage(200)},
		{method: "GET", route: "/tokens", want: signedInPage(200)},
		{method: "POST", route: "/tokens", form: url.Values{"name": {"page token of {role}"}}, want: signedInPage(201)},
		{method: "POST", route: "/tokens/:id", path: "/tokens/{pageTokenToEdit}", form: url.Values{"name": {"edited by {role}"}, "requests_per_minute": {"10"}},
			want: pageNamesA(403, 303), ownedByA: true},
		{method: "POST", route: "/tokens/:id/revoke", path: "/tokens/{pageTokenToRevoke}/revoke", form: url.Values{}, want: pageNamesA(403, 303), ownedByA: true},
		{method: "POST", route: "/tokens/:id/signing", path: "/tokens/{tokenToSign}/signing", form: url.Values{"required": {"true"}}, want: pageNamesA(403, 200), ownedByA: true},
		{method: "GET", route: "/invoices/:id/csv", path: "/invoices/{invoice}/csv", want: pageNamesA(200, 200), ownedByA: true},
		{method: "GET", route: "/files/:id", path: "/files/{file}", want: pageNamesA(200, 200), ownedByA: true},
		{method: "GET", route: "/jobs/:id/result", path: "/jobs/{job}/result", want: pageNamesA(404, 404), ownedByA: true}, // queued: no result yet
		{method: "POST", route: "/billing/budget", form: url.Values{"monthly_limit": {"20.00"}}, want: st(303, 403, 303, 303, 403, 303)},
		{method: "POST", route: "/billing/low-balance", form: url.Values{"low_balance_threshold": {"1.00"}}, want: st(303, 403, 303, 303, 403, 303)},
		{method: "POST", route: "/billing/redeem", form: url.Values{"code": {"rc_NOTACODE"}}, want: signedInPage(422)},
		{method: "POST", route: "/billing/time-zone", form: url.Values{"time_zone": {"Asia/Tokyo"}}, want: st(303, 403, 303, 303, 403, 303)},
		{method: "POST", route: "/billing/webhook", form: url.Values{"webhook_url": {""}}, want: st(303, 403, 303, 303, 403, 303)},
		// By now the admin declined B's request and moved A back to free: each owner's request is new.
		{method: "POST", route: "/billing/upgrade", form: url.Values{"tier": {"premium"}}, want: st(303, 403, 303, 422, 403, 303)},
		{method: "GET", route: "/billing/payments", want: signedInPage(200)},
		{method: "POST", route: "/billing/top-up", form: url.Values{"amount": {"25.00"}}, want: st(303, 403, 422, 422, 403, 422)},
		{method: "POST", route: "/billing/subscribe", form: url.Values{"tier": {"premium"}}, want: st(303, 403, 422, 422, 403, 422)},
		{method: "POST", route: "/billing/portal", form: url.Values{}, want: st(303, 403, 422, 422, 403, 422)},
		{method: "POST", route: "/billing/auto-recharge", form: url.Values{}, want: st(303, 403, 422, 422, 403, 422)},
		{method: "GET", route: "/organization", want: signedInPage(200)},
		{method: "POST", route: "/organization/invitations", form: url.Values{"email": {"{role}@pageinvited.example"}, "role": {"member"}},
			want: st(303, 403, 201, 201, 403, 201)},
		{method: "POST", route: "/organization/invitations/:id/revoke", path: "/organization/invitations/{pageInvitationToRevoke}/revoke", form: url.Values{},
			want: st(303, 403, 404, 404, 403, 303), ownedByA: true},
		{method: "POST", route: "/organization/members/:user_id/role", path: "/organization/members/{pageSecondOwnerA}/role", form: url.Values{"role": {"member"}},
			want: st(303, 403, 404, 404, 403, 303), ownedByA: true},
		{method: "POST", route: "/organization/members/:user_id/remove", path: "/organization/members/{pageLeavingA}/remove", form: url.Values{},
			want: st(303, 403, 404, 404, 403, 303), ownedByA: true},
		{method: "POST", route: "/session/organization", form: url.Values{"id": {"{orgA}"}}, want: pageNamesA(303, 303), ownedByA: true},
		// An invitation's page is anyone's who holds its link; Capybara's names nothing of A's.
		{method: "GET", route: "/invitations/:code", path: "/invitations/{invitationForGuest}", want: anyone(200)},
		// Capybara invites B's owner, who accepts first (and so acts in Capybara from here on, where B's owner is refused
		// anyway); the others find it used.
		{method: "POST", route: "/invitations/:code/accept", path: "/invitations/{invitationForOwnerB}/accept", form: url.Values{}, want: st(303, 403, 303, 409, 409, 409)},

		{method: "GET", route: "/admin", want: adminPage(303)},
		{method: "GET", route: "/admin/organizations", want: adminPage(200)},
		{method: "GET", route: "/admin/organizations/:id", path: "/admin/organizations/{orgA}", want: adminPage(200)},
		{method: "GET", route: "/admin/organizations/:id/invoices/:invoice", path: "/admin/organizations/{orgA}/invoices/{invoice}", want: adminPage(200)},
		{method: "GET", route: "/admin/organizations/:id/invoices/:invoice/csv", path: "/admin/organizations/{orgA}/invoices/{invoice}/csv", want: adminPage(200)},
		{method: "POST", route: "/admin/organizations/:id/tier", path: "/admin/organizations/{orgA}/tier", form: url.Values{"tier": {"free"}}, want: adminPage(303)},
		{method: "GET", route: "/admin/organizations/:id/export", path: "/admin/organizations/{orgA}/export", want: adminPage(200)},
		{method: "POST", route: "/admin/organizations/:id/delete", path: "/admin/organizations/{pageOrgToDelete}/delete", form: url.Values{}, want: adminPage(303)},
		{method: "GET", route: "/admin/users", want: adminPage(200)},
		{method: "POST", route: "/admin/users/:id/disable", path: "/admin/users/{pageUserToDisable}/disable", form: url.Values{}, want: adminPage(303)},
		{method: "POST", route: "/admin/users/:id/password-reset", path: "/admin/users/{secondOwnerA}/password-reset", form: url.Values{}, want: adminPage(200)},
		{method: "POST", route: "/admin/users/:id/enable", path: "/admin/users/{pageUserToEnable}/enable", form: url.Values{}, want: adminPage(303)},
		{method: "POST", route: "/admin/organizations/:id/balance-adjustments", path: "/admin/organizations/{orgA}/balance-adjustments",
			form: url.Values{"amount": {"1.00"}, "reason": {"the table"}}, want: adminPage(303)},
		{method: "GET", route: "/admin/redeem-codes", want: adminPage(200)},
		{method: "POST", route: "/admin/redeem-codes", form: url.Values{"amount": {"1.00"}}, want: adminPage(201)},
		{method: "POST", route: "/admin/upgrade-requests/:id/approve", path: "/admin/upgrade-requests/{upgradeC}/approve", form: url.Values{}, want: adminPage(303)},
		{method: "POST", route: "/admin/upgrade-requests/:id/decline", path: "/admin/upgrade-requests/{upgradeD}/decline", form: url.Values{}, want: adminPage(303)},
		{method: "GET", route: "/admin/tiers", want: adminPage(200)},
		{method: "POST", route: "/admin/tiers", form: url.Values{"name": {"page-tier"}, "capacity": {"5"}, "refill_per_sec": {"1"}, "tokens_per_minute": {"0"},
			"freeze_threshold": {"20"}, "freeze_minutes": {"10"}, "refill_floor": {"0"}, "upstream_fallback": {"error"}, "monthly_fee": {"0"},
			"included_credit": {"0"}, "overage": {"bill"}}, want: adminPage(303)},
		{method: "POST", route: "/admin/tiers/:name", path: "/admin/tiers/free", form: freeTierForm("30", "0.5"), want: adminPage(303)},
		{method: "POST", route: "/admin/tiers/:name/delete", path: "/admin/tiers/spare-page/delete", form: url.Values{}, want: adminPage(303)},
		{method: "POST", route: "/admin/freezes/:id/lift", path: "/admin/freezes/{freezePage}/lift", form: url.Values{}, want: adminPage(303)},
		{method: "GET", route: "/admin/prices", want: adminPage(200)},
		{method: "POST", route: "/admin/prices", form: url.Values{"model": {"gpt-4o"}, "input_per_mtok": {"1"}, "output_per_mtok": {"2"}, "cached_input_per_mtok": {"0.5"}}, want: adminPage(303)},
		{method: "GET", route: "/admin/audit", want: adminPage(200)},
		{method: "GET", route: "/admin/upstreams", want: adminPage(200)},
		{method: "POST", route: "/admin/upstreams", form: url.Values{"name": {"page key"}, "base_url": {"https://api.example.com/v1"}, "api_key": {"sk-upstream-page"}, "weight": {"1"}},
			want: adminPage(303)},
		{method: "POST", route: "/admin/upstreams/:id/delete", path: "/admin/upstreams/{upstreamPage}/delete", form: url.Values{}, want: adminPage(303)},
		{method: "GET", route: "/admin/aliases", want: adminPage(200)},
		{method: "POST", route: "/admin/aliases", form: url.Values{"name": {"alias-page-new"}, "targets": {"sluice-local"}}, want: adminPage(303)},
		{method: "POST", route: "/admin/aliases/:name", path: "/admin/aliases/alias-page", form: url.Values{"targets": {"sluice-local=2"}}, want: adminPage(303)},
		{method: "POST", route: "/admin/aliases/:name/delete", path: "/admin/aliases/alias-page-gone/delete", form: url.Values{}, want: adminPage(303)},
	}
}

// tenantFixture is the cast of the route table: organizations A and B,
// each with an owner and a member and each member with an API token, an
// admin with one, and the things of A's that routes name by id.
type tenantFixture struct {
	e        *genEnv
	creds    map[string][2]string // role -> email, password
	sessions map[string]string    // role -> management API session
	cookies  map[string]*http.Cookie
	tokens   map[string]string // role -> API token
	ids      map[string]string // {name} in a path -> value
	// markers are strings only A's data contains: no stranger may see one.
	markers []string
}

// TestRouteRoleTenantTable calls every route the router serves as each
// role of two organizations and Sluice's admin (OWASP API1 and API5): each
// gets the status the table says; routes naming A's data by id answer 404
// to everyone outside A and change nothing; no answer to an outsider shows
// anything of A's; and every page rendered keeps to the pages' CSP.
func TestRouteRoleTenantTable(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *models.DB) {
		checkRouteTable(t, db, newTenantFixture(t, db))
	})
}

func checkRouteTable(t *testing.T, db *models.DB, f *tenantFixture) {
	// Every role calls every /v1 route of the table: more than the free
	// tier's burst of 30, which is not what this test is about.
	ctx, e := context.Background(), f.e
	admin, _ := e.store.UserByEmail(ctx, "admin@example.com")
	free, _ := e.store.TierByName(ctx, "free")
	settings := free.Settings()
	settings.Capacity = 1000
	settings.MaxAPITokens = 0 // A holds more tokens than the free tier's 10: one per route that names one
	if _, err := e.acc.UpdateTier(ctx, admin, "free", settings); err != nil {
		t.Fatal(err)
	}
	rows := routeTable()
	// A burst for every /v1 row's calls as A's two roles after the
	// fixture's own: the free tier's 30 is less than the table spends.
	if w := f.e.do(request{method: "PUT", path: "/api/admin/tiers/free", bearer: f.sessions["admin"], body: `{"capacity":100}`}); w.Code != 200 {
		t.Fatalf("tier: %d %s", w.Code, w.Body.String())
	}

	// Every registered route has a row, and every row a route.
	listed := map[string]bool{}
	for _, r := range rows {
		listed[r.method+" "+r.route] = true
	}
	var unlisted []string
	for _, r := range f.e.h.(*gin.Engine).Routes() {
		key := r.Method + " " + r.Path
		if !listed[key] {
			unlisted = append(unlisted, key)
		}
		delete(listed, key)
	}
	sort.Strings(unlisted)
	for _, key := range unlisted {
		t.Errorf("%s is not in the route table (handlers/security_routes_test.go): add a row saying which roles may call it and whether it names a tenant's data", key)
	}
	for key := range listed {
		t.Errorf("the route table lists %s, which the router does not serve", key)
	}
	for _, r := range rows {
		t.Run(r.method+" "+r.route, func(t *testing.T) {
			// The strangers call first (see tenantRoles): the database as it
			// was before them must be as it is after them.
			var before string
			if r.ownedByA {
				before = volatile.ReplaceAllString(dumpDB(t, db), "")
			}
			for i, role := range tenantRoles {
				stranger := role == "memberB" || role == "ownerB" || (role == "admin" && !strings.Contains(r.route, "/admin"))
				w := f.call(t, r, role)
				if w.Code != r.want[i] {
					t.Errorf("as %s: %d, want %d; body: %.300s", role, w.Code, r.want[i], w.Body.String())
				}
				if stranger || role == "anonymous" {
					body := strings.ToLower(w.Body.String() + fmt.Sprint(w.Header()))
					for _, m := range f.markers {
						if strings.Contains(body, strings.ToLower(m)) {
							t.Errorf("as %s: the answer shows A's %q", role, m)
						}
					}
				}
				if strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
					problems, err := csptest.Violations(strings.NewReader(w.Body.String()))
					if err != nil {
						t.Fatal(err)
					}
					for _, p := range problems {
						t.Errorf("as %s: the page breaks its Content-Security-Policy: %s", role, p)
					}
				}
				if before != "" && role == "admin" { // the last stranger
					if after := volatile.ReplaceAllString(dumpDB(t, db), ""); after != before {
						t.Errorf("requests by B's members and the admin naming A's data changed the database:\n%s", diffLines(before, after))
					}
				}
			}
		})
	}
}

// volatile matches what a refused call may change without touching anyone
// else's data: the caller's own token's last use.
var volatile = regexp.MustCompile(` last_used_at=[^ \n]*`)

// call makes r's request as role.
func (f *tenantFixture) call(t *testing.T, r routeRow, role string) *httptest.ResponseRecorder {
	t.Helper()
	path := r.path
	if path == "" {
		path = r.route
	}
	for k, v := range f.ids {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	if strings.Contains(path, "{") {
		t.Fatalf("unfilled id in %s", path)
	}
	fill := func(s string) string {
		for k, v := range f.ids {
			s = strings.ReplaceAll(s, "{"+k+"}", v)
		}
		return strings.ReplaceAll(s, "{role}", role)
	}
	var body string
	var req *http.Request
	switch {
	case r.upload != "":
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		_ = mw.WriteField("purpose", "batch")
		fw, _ := mw.CreateFormFile("file", "requests.jsonl")
		_, _ = fw.Write([]byte(fill(r.upload)))
		_ = mw.Close()
		req = httptest.NewRequest(r.method, path, &b)
		req.Header.Set("Content-Type", mw.FormDataContentType())
	case r.form != nil:
		form := url.Values{}
		for k, vs := range r.form {
			for _, v := range vs {
				form.Add(k, fill(v))
			}
		}
		body = form.Encode()
		req = httptest.NewRequest(r.method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	default:
		req = httptest.NewRequest(r.method, path, strings.NewReader(fill(r.body)))
		if r.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if role != "anonymous" {
		switch {
		case strings.HasPrefix(path, "/v1/"):
			req.Header.Set("Authorization", "Bearer "+f.tokens[role])
		case strings.HasPrefix(path, "/api/"):
			s := f.sessions[role]
			if r.fresh {
				s = f.e.login(f.creds[role][0], f.creds[role][1])
			}
			req.Header.Set("Authorization", "Bearer "+s)
		default:
			c := f.cookies[role]
			if r.fresh {
				c = f.e.browserLogin(t, f.creds[role][0], f.creds[role][1]).cookie
			}
			req.AddCookie(c)
		}
	}
	return serve(f.e.h, req, "")
}

// newTenantFixture builds the cast on db.
func newTenantFixture(t *testing.T, db *models.DB) *tenantFixture {
	t.Helper()
	ctx := context.Background()
	e := newGenEnv(t, db) // its job queue is never started: jobs stay queued

	f := &tenantFixture{e: e, creds: map[string][2]string{}, sessions: map[string]string{}, cookies: map[string]*http.Cookie{},
		tokens: map[string]string{}, ids: map[string]string{}}
	hash, _ := bcrypt.GenerateFromPassword([]byte("password123"), bcrypt.MinCost)
	org := func(owner, member, name string) (string, string) {
		e.signup(owner, name)
		u, err := e.store.UserByEmail(ctx, owner)
		if err != nil {
			t.Fatal(err)
		}
		testdb.AddMember(t, db, u.LastOrgID, member, string(hash), models.RoleMember)
		return itoa(u.LastOrgID), owner
	}
	f.ids["orgA"], _ = org("owner@aardvark.example", "member@aardvark.example", "Aardvark Analytics")
	org("owner@zebra.example", "member@zebra.example", "Zebra Zoology")
	f.creds = map[string][2]string{
		"memberA": {"member@aardvark.example", "password123"}, "ownerA": {"owner@aardvark.example", "password123"},
		"memberB": {"member@zebra.example", "password123"}, "ownerB": {"owner@zebra.example", "password123"},
		"admin": {"admin@example.com", "admin-password"},
	}
	for role, c := range f.creds {
		f.sessions[role] = e.login(c[0], c[1])
		f.cookies[role] = e.browserLogin(t, c[0], c[1]).cookie
		f.tokens[role], _ = e.apiToken(f.sessions[role])
	}
	e.signup("login@quokka.example", "Quokka")

	// A's things, which the routes with ids name.
	ownerA := f.sessions["ownerA"]
	newToken := func(name string) (string, int64) {
		w := e.do(request{method: "POST", path: "/api/tokens", bearer: ownerA, body: `{"name":"aardvark ` + name + `"}`})
		if w.Code != 201 {
			t.Fatalf("token: %d %s", w.Code, w.Body.String())
		}
		m := decode(t, w)
		return m["token"].(string), int64(m["id"].(float64))
	}
	_, id := newToken("to revoke by API")
	f.ids["tokenToRevoke"] = itoa(id)
	_, id = newToken("to revoke by page")
	f.ids["pageTokenToRevoke"] = itoa(id)
	_, id = newToken("to sign")
	f.ids["tokenToSign"] = itoa(id)
	_, id = newToken("to edit by API")
	f.ids["tokenToEdit"] = itoa(id)
	_, id = newToken("to edit by page")
	f.ids["pageTokenToEdit"] = itoa(id)
	w := e.do(request{method: "POST", path: "/v1/chat/completions", bearer: f.tokens["ownerA"], body: chatBody,
		header: map[string]string{"X-Sluice-Session": "aardvark-conversation"}})
	if w.Code != 200 {
		t.Fatalf("conversation: %d %s", w.Code, w.Body.String())
	}
	f.ids["conversation"] = "aardvark-conversation"
	respond := func() string {
		w := e.do(request{method: "POST", path: "/v1/responses", bearer: f.tokens["ownerA"], body: `{"model":"sluice-local","input":"aardvark response"}`})
		if w.Code != 200 {
			t.Fatalf("response: %d %s", w.Code, w.Body.String())
		}
		return decode(t, w)["id"].(string)
	}
	f.ids["response"], f.ids["responseToDelete"] = respond(), respond()
	w = e.do(request{method: "POST", path: "/v1/jobs", bearer: f.tokens["ownerA"], body: `{"model":"sluice-local","messages":[{"role":"user","content":"aardvark job"}]}`})
	if w.Code != 202 {
		t.Fatalf("job: %d %s", w.Code, w.Body.String())
	}
	f.ids["job"] = decode(t, w)["id"].(string)
	upload := func() string {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		_ = mw.WriteField("purpose", "batch")
		fw, _ := mw.CreateFormFile("file", "aardvark.jsonl")
		_, _ = fw.Write([]byte(`{"custom_id":"aardvark-1","method":"POST","url":"/v1/chat/completions","body":{"model":"sluice-local","messages":[{"role":"user","content":"aardvark"}]}}` + "\n"))
		_ = mw.Close()
		w := e.do(request{method: "POST", path: "/v1/files", bearer: f.tokens["ownerA"], contentType: mw.FormDataContentType(), body: b.String()})
		if w.Code != 200 {
			t.Fatalf("upload: %d %s", w.Code, w.Body.String())
		}
		return decode(t, w)["id"].(string)
	}
	f.ids["file"], f.ids["fileToDelete"] = upload(), upload()
	w = e.do(request{method: "POST", path: "/v1/batches", bearer: f.tokens["ownerA"],
		body: `{"input_file_id":"` + f.ids["file"] + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`})
	if w.Code != 200 {
		t.Fatalf("batch: %d %s", w.Code, w.Body.String())
	}
	f.ids["batch"] = decode(t, w)["id"].(string)
	w = e.do(request{method: "GET", path: "/api/invoices", bearer: ownerA})
	invoices, _ := decode(t, w)["data"].([]any)
	if len(invoices) == 0 {
		t.Fatalf("A has no invoice: %s", w.Body.String())
	}
	f.ids["invoice"] = fmt.Sprint(invoices[0].(map[string]any)["id"])

	// Upgrade requests for the admin to decide, one per organization.
	upgrade := func(session string) string {
		w := e.do(request{method: "POST", path: "/api/upgrade-requests", bearer: session, body: `{"tier":"premium"}`})
		if w.Code != 201 {
			t.Fatalf("upgrade request: %d %s", w.Code, w.Body.String())
		}
		return fmt.Sprint(decode(t, w)["id"])
	}
	f.ids["upgradeA"], f.ids["upgradeB"] = upgrade(ownerA), upgrade(f.sessions["ownerB"])
	capybara := e.signup("owner@capybara.example", "Capybara")
	f.ids["upgradeC"] = upgrade(capybara)
	f.ids["upgradeD"] = upgrade(e.signup("owner@dingo.example", "Dingo"))

	for _, name := range []string{"freezeAPI", "freezePage"} {
		_, tokID := newToken(name)
		orgID := int64(0)
		fmt.Sscan(f.ids["orgA"], &orgID)
		fr, err := e.store.CreateFreeze(ctx, models.Freeze{TokenID: tokID, OrgID: orgID, Reason: "test", WindowCount: 25,
			FrozenFrom: e.clock.Now(), FrozenUntil: e.clock.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		f.ids[name] = itoa(fr.ID)
	}
	admin, err := e.store.UserByEmail(ctx, "admin@example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"upstreamAPI", "upstreamPage"} {
		k, err := e.providers.Create(ctx, admin, models.UpstreamKeyInput{Name: name, BaseURL: "https://api.example.com/v1", APIKey: "sk-upstream-" + name, Weight: 1})
		if err != nil {
			t.Fatal(err)
		}
		f.ids[name] = itoa(k.ID)
	}
	for _, name := range []string{"alias-api", "alias-api-gone", "alias-page", "alias-page-gone"} {
		if _, err := e.aliases.Create(ctx, admin, models.ModelAliasInput{Name: name, Targets: []models.AliasTarget{{Model: "sluice-local", Weight: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"spare-api", "spare-page"} {
		if _, err := e.acc.CreateTier(ctx, admin, name, models.TierSettings{Capacity: 1, RefillPerSec: 1}); err != nil {
			t.Fatal(err)
		}
	}

	// A's other members, to demote and to remove; the leaving ones are signed
	// in, which their removal ends (A holds as many tokens as its tier allows
	// by the time the table runs, so theirs are in the members' own tests).
	orgA := int64(0)
	fmt.Sscan(f.ids["orgA"], &orgA)
	for name, role := range map[string]models.Role{"secondOwnerA": models.RoleOwner, "pageSecondOwnerA": models.RoleOwner,
		"leavingA": models.RoleMember, "pageLeavingA": models.RoleMember} {
		email := strings.ToLower(name) + "@aardvark.example"
		m := testdb.AddMember(t, db, orgA, email, string(hash), role)
		f.ids[name] = itoa(m.ID)
		if role == models.RoleMember {
			e.login(email, "password123")
		}
	}
	invite := func(session, email string) (string, string) {
		w := e.do(request{method: "POST", path: "/api/organization/invitations", bearer: session, body: `{"email":"` + email + `","role":"member"}`})
		if w.Code != 201 {
			t.Fatalf("invite %s: %d %s", email, w.Code, w.Body.String())
		}
		m := decode(t, w)
		return fmt.Sprint(m["id"]), m["code"].(string)
	}
	f.ids["invitationToRevoke"], _ = invite(ownerA, "revoked@aardvark.example")
	f.ids["pageInvitationToRevoke"], _ = invite(ownerA, "page-revoked@aardvark.example")
	_, f.ids["invitationForOwnerA"] = invite(capybara, "owner@aardvark.example")
	_, f.ids["invitationForOwnerB"] = invite(capybara, "owner@zebra.example")
	_, f.ids["invitationForGuest"] = invite(capybara, "guest@capybara.example")

	// Organizations to delete and users to disable and enable, none of A's.
	f.ids["orgToDelete"] = itoa(e.signupOrg("owner@emu.example", "Emu Exports"))
	f.ids["pageOrgToDelete"] = itoa(e.signupOrg("owner@gnu.example", "Gnu Goods"))
	for _, name := range []string{"userToDisable", "pageUserToDisable", "userToEnable", "pageUserToEnable"} {
		email := strings.ToLower(name) + "@yak.example"
		e.signup(email, "Yak "+name)
		u, err := e.store.UserByEmail(ctx, email)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(name, "Enable") {
			if _, err := e.acc.DisableUser(ctx, admin, u.ID); err != nil {
				t.Fatal(err)
			}
		}
		f.ids[name] = itoa(u.ID)
	}

	f.markers = []string{"aardvark", f.tokens["ownerA"][:20], f.tokens["memberA"][:20]}
	return f
}
