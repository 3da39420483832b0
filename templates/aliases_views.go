package templates

// AdminSectionAliases is the model aliases page of the admin console.
const AdminSectionAliases = "aliases"

// AdminAliasesView lists the model aliases and holds the alias form:
// empty to add one, or filled to change the alias named by Form.Editing.
type AdminAliasesView struct {
	Aliases []AliasRow
	Form    AliasForm
	Models  []string // the models the keys serve, offered in the form
}

// AliasRow is one alias as the admin reads it.
type AliasRow struct {
	Name      string
	Targets   []AliasTargetRow
	Fallbacks []string
	Updated   string // when, and by whom, it was last changed
	EditURL   string
	DeleteURL string
}

// AliasTargetRow is one target with its share of the alias's traffic.
type AliasTargetRow struct {
	Model  string
	Weight int
	Share  string // "70%"
}

// AliasForm is the alias form as typed: targets as "model=weight, …",
// fallbacks as "model, …".
type AliasForm struct {
	Editing   string // the alias being changed; "" to add one
	Name      string
	Targets   string
	Fallbacks string
}

// Action is where the form posts.
func (f AliasForm) Action() string {
	if f.Editing != "" {
		return "/admin/aliases/" + f.Editing
	}
	return "/admin/aliases"
}
