package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/testenv"
)

// GET /v1/sandboxes pages with limit and after: each page holds at most limit of the
// caller's own sandboxes, next is set while more follow, and List follows it to the
// end. Without limit the whole list comes in one answer, as clients from before pages
// expect; a bad limit or after is refused and says what is allowed.
func TestListPages(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice", "bob"}})
	alice, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	bob, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "bob")})
	var want []string
	for i := range 7 {
		name := fmt.Sprintf("a-%d", i)
		if _, err := alice.Create(bg, api.CreateSandboxRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
		want = append(want, name)
		if i%3 == 0 {
			if _, err := bob.Create(bg, api.CreateSandboxRequest{Name: fmt.Sprintf("b-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}

	var got, sizes []string
	after := ""
	for range 10 {
		page, next, err := alice.ListPage(bg, client.ListOptions{PageSize: 3}, after)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, fmt.Sprint(len(page)))
		for _, sb := range page {
			got = append(got, sb.Name)
		}
		if next == "" {
			break
		}
		after = next
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || strings.Join(sizes, " ") != "3 3 1" {
		t.Errorf("alice's pages of 3: %v in pages of %v; want %v in pages of 3 3 1", got, sizes, want)
	}
	all, err := alice.List(bg, client.ListOptions{PageSize: 2})
	if err != nil || len(all) != 7 {
		t.Errorf("List in pages of 2: %d sandboxes, %v; want 7", len(all), err)
	}

	get := func(q string) (int, api.SandboxList, string) {
		req, _ := http.NewRequest("GET", "http://"+n.Addr+"/v1/sandboxes?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+n.Token(t, "alice"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body json.RawMessage
		json.NewDecoder(resp.Body).Decode(&body)
		var list api.SandboxList
		json.Unmarshal(body, &list)
		return resp.StatusCode, list, string(body)
	}
	if code, list, body := get(""); code != 200 || len(list.Sandboxes) != 7 || list.Next != "" {
		t.Errorf("without limit: %d %s; want all 7 and no next", code, body)
	}
	if code, list, body := get("limit=7"); code != 200 || len(list.Sandboxes) != 7 || list.Next != "" {
		t.Errorf("limit=7 of 7: %d %s; want all 7 and no next", code, body)
	}
	for _, q := range []string{"limit=0", "limit=5001", "limit=ten", "after=bogus", "after=" + "MjAyNi0xMi0wNlQwMDowMDowMC4wMDAwMDAwMDBa"} {
		if code, _, body := get(q); code != 400 || !strings.Contains(body, strings.SplitN(q, "=", 2)[0]) {
			t.Errorf("?%s: %d %s; want 400 naming the parameter", q, code, body)
		}
	}
}

// A list shows each record as it is now: a record listed before (whose JSON the server
// keeps) is listed again as it changed, for a change of its record (suspend) and for
// traffic kept in memory only (its last activity), and as GET shows it; another
// owner's list never shows it.
func TestListShowsEachChange(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice", "bob"}})
	alice, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	bob, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "bob")})
	for _, name := range []string{"a-0", "a-1"} {
		if _, err := alice.Create(bg, api.CreateSandboxRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bob.Create(bg, api.CreateSandboxRequest{Name: "b-0"}); err != nil {
		t.Fatal(err)
	}
	check := func(step string) {
		t.Helper()
		for _, c := range []struct {
			who  *client.Client
			want string
		}{{alice, "a-0 a-1"}, {bob, "b-0"}} {
			list, err := c.who.List(bg, client.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, sb := range list {
				names = append(names, sb.Name)
				got, _ := json.Marshal(sb)
				one, err := c.who.Get(bg, sb.Name)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := json.Marshal(one)
				if string(got) != string(want) {
					t.Errorf("%s: %s listed as\n%s\nGET shows\n%s", step, sb.Name, got, want)
				}
			}
			if strings.Join(names, " ") != c.want {
				t.Errorf("%s: listed %v, want %s", step, names, c.want)
			}
		}
	}
	check("created")
	before, _ := alice.Get(bg, "a-0")
	time.Sleep(2 * time.Millisecond) // a later activity than the record's
	n.Manager.Touch(before.ID)
	if after, _ := alice.Get(bg, "a-0"); !after.LastActivity.After(before.LastActivity) {
		t.Fatalf("traffic to a-0 did not move its last activity (%v, then %v)", before.LastActivity, after.LastActivity)
	}
	check("touched")
	if _, err := alice.Suspend(bg, "a-1"); err != nil {
		t.Fatal(err)
	}
	check("suspended")
	if list, _ := alice.List(bg, client.ListOptions{}); len(list) != 2 || list[1].State != api.StateSuspended {
		t.Errorf("after the suspend of a-1, alice's list is %+v", list)
	}
}
