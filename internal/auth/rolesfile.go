package auth

import (
	"context"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

// LoadRolesFile reads custom roles from a YAML file, each a role name mapped to its
// permissions:
//
//	auditor: [audit.read, snapshot.*]
//
// and applies them, replacing custom roles of the same names. A malformed file changes
// nothing, and its error names the line at fault.
func (s *Service) LoadRolesFile(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("roles file: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("roles file %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("roles file %s line %d: want a mapping of role names to lists of permissions", path, top.Line)
	}
	roles := map[string][]string{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if !nameRE().MatchString(k.Value) {
			return fmt.Errorf("roles file %s line %d: invalid role name %q: a name is %s", path, k.Line, k.Value, NameRule)
		}
		if _, ok := BuiltinRoles[k.Value]; ok {
			return fmt.Errorf("roles file %s line %d: %q is a built-in role and cannot be redefined", path, k.Line, k.Value)
		}
		if _, dup := roles[k.Value]; dup {
			return fmt.Errorf("roles file %s line %d: role %q is defined twice", path, k.Line, k.Value)
		}
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			return fmt.Errorf("roles file %s line %d: role %q needs a list of permissions", path, v.Line, k.Value)
		}
		for _, p := range v.Content {
			if _, err := expand([]string{p.Value}); err != nil {
				return fmt.Errorf("roles file %s line %d: role %q: %v", path, p.Line, k.Value, err)
			}
			roles[k.Value] = append(roles[k.Value], p.Value)
		}
	}
	for name, perms := range roles {
		if _, err := s.PutRole(ctx, name, perms); err != nil {
			return fmt.Errorf("roles file %s: %w", path, err)
		}
	}
	return nil
}
