package wire

import "testing"

func TestSetMembersChangesOnlyTheMembersNamed(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{`{"id":"msg_1","type":"message","model":"claude-x","content":[{"type":"text","text":"hi \"there\""}],"usage":{"id":"x"}}`,
			`{"id":"msg_gw","type":"message","model":"fast","content":[{"type":"text","text":"hi \"there\""}],"usage":{"id":"x"}}`},
		{`{ "model" : "a",  "id": 7 }`, `{ "model" : "fast",  "id": "msg_gw" }`},
		{`{"type":"message"}`, `{"type":"message","id":"msg_gw","model":"fast"}`},
		{`{}`, `{"id":"msg_gw","model":"fast"}`},
		{`{"model":"a","model":"b"}`, `{"model":"fast","model":"b","id":"msg_gw"}`},
		{"{\"id\":\"x\"}\n", "{\"id\":\"msg_gw\",\"model\":\"fast\"}\n"},
	} {
		got, err := SetMembers([]byte(tc.in), []string{"id", "model"}, []string{"msg_gw", "fast"})
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if string(got) != tc.want {
			t.Errorf("SetMembers(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

func TestSetMemberQuotesAsJSON(t *testing.T) {
	got, err := SetMember([]byte(`{"model":"a"}`), "model", "é\"<\u2028")
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\"model\":\"é\\\"<\u2028\"}"; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestSetMemberRefusesWhatIsNotAnObject(t *testing.T) {
	for _, in := range []string{``, `[]`, `"x"`, `{"a":`, `{"a" 1}`} {
		if _, err := SetMember([]byte(in), "model", "x"); err == nil {
			t.Errorf("SetMember(%q): no error", in)
		}
	}
}

func TestMemberIsWhereTheValueIsWritten(t *testing.T) {
	obj := []byte(`{"type":"message_start", "message" : {"id":"x"} ,"n":1}`)
	v, at, ok, err := Member(obj, "message")
	if err != nil || !ok || string(v) != `{"id":"x"}` || string(obj[at:at+len(v)]) != `{"id":"x"}` {
		t.Fatalf("Member: %q at %d, %v %v", v, at, ok, err)
	}
	if _, _, ok, err := Member(obj, "usage"); ok || err != nil {
		t.Errorf("an absent member: %v %v", ok, err)
	}
}
