// bundle-validate is a stand-in for
//
//	operator-sdk bundle validate <dir> --select-optional suite=operatorframework [--optional-values k8s-version=X]
//
// built from the library operator-sdk itself uses (github.com/operator-framework/api), because the
// Go module proxy refuses every operator-sdk version. It is stricter than operator-sdk on purpose:
// a warning fails like an error (our bar is "no error and no warning"), and where it was unclear
// whether operator-sdk runs a validator, it is run.
//
// Usage: bundle-validate <bundle-dir> [--optional-values k8s-version=1.34[,key=value...]]
// (`--select-optional suite=operatorframework` is accepted too, and changes nothing.)
// Prints one ERROR/WARN line per finding, exits 1 on any, else 0 with a summary line.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	apierrors "github.com/operator-framework/api/pkg/validation/errors"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
	k8svalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"
)

type namedValidator struct {
	name string
	interfaces.Validator
}

// validators run on every bundle, in this order.
var validators = []namedValidator{
	// What `operator-sdk bundle validate` always runs (its internal/registry.ValidateBundleContent,
	// i.e. validation.DefaultBundleValidators): CSV, CRD and bundle-level checks (owned CRDs present,
	// service accounts, size, related images...).
	{"ClusterServiceVersion", apivalidation.ClusterServiceVersionValidator},
	{"CustomResourceDefinition", apivalidation.CustomResourceDefinitionValidator},
	{"Bundle", apivalidation.BundleValidator},
	// suite=operatorframework in operator-sdk since it moved to api v0.20 (operator-sdk PR #6639):
	// operatorhubv2 + capabilities + categories replace the deprecated "operatorhub" validator,
	// plus alpha-deprecated-apis (uses k8s-version) and good-practices.
	{"OperatorHubV2", apivalidation.OperatorHubV2Validator},
	{"StandardCapabilities", apivalidation.StandardCapabilitiesValidator},
	{"StandardCategories", apivalidation.StandardCategoriesValidator},
	{"AlphaDeprecatedAPIs", apivalidation.AlphaDeprecatedAPIsValidator},
	{"GoodPractices", apivalidation.GoodPracticesValidator},
	// Strictness: opm's optional "bundle-objects" checks (PDBs, PriorityClasses, RBAC on SCCs).
	{"Object", apivalidation.ObjectValidator},
	// Left out on purpose:
	// - OperatorHubValidator (deprecated): its checks are exactly OperatorHubV2 + StandardCapabilities
	//   + StandardCategories above; it only adds an unconditional "validator is deprecated" warning.
	// - MultipleArchitecturesValidator: shells out to docker/podman to inspect the images (needs a
	//   container registry); not in the suite.
	// - CommunityOperatorValidator: deprecated, OpenShift-index specific, not in the suite.
	// - PackageManifestValidator, OperatorGroupValidator: act on types a bundle directory never yields.
}

// Bundle annotation keys (operator-registry's pkg/lib/bundle).
const (
	mediatypeLabel      = "operators.operatorframework.io.bundle.mediatype.v1"
	manifestsLabel      = "operators.operatorframework.io.bundle.manifests.v1"
	metadataLabel       = "operators.operatorframework.io.bundle.metadata.v1"
	packageLabel        = "operators.operatorframework.io.bundle.package.v1"
	channelsLabel       = "operators.operatorframework.io.bundle.channels.v1"
	channelDefaultLabel = "operators.operatorframework.io.bundle.channel.default.v1"
)

// Kinds a registry+v1 bundle may ship besides the CSV and CRDs (operator-registry's
// pkg/lib/bundle/supported_resources.go, v1.69.0).
var supportedKinds = map[string]bool{
	"Secret": true, "ClusterRole": true, "ClusterRoleBinding": true, "ConfigMap": true,
	"ServiceAccount": true, "Service": true, "Role": true, "RoleBinding": true,
	"PrometheusRule": true, "ServiceMonitor": true, "PodMonitor": true, "PodDisruptionBudget": true,
	"PriorityClass": true, "VerticalPodAutoscaler": true, "NetworkPolicy": true,
	"ConsoleYAMLSample": true, "ConsoleQuickStart": true, "ConsoleCLIDownload": true,
	"ConsoleLink": true, "ConsolePlugin": true,
}

func main() {
	dir, optional, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "bundle-validate: %v\nusage: bundle-validate <bundle-dir> [--optional-values key=value[,key=value]]\n", err)
		os.Exit(2)
	}

	// StandardCategories would accept extra categories from this file; use the standard list only.
	os.Unsetenv("OPERATOR_BUNDLE_CATEGORIES")

	var findings []string
	report := func(validator string, results ...apierrors.ManifestResult) {
		for _, r := range results {
			for _, e := range append(r.Errors, r.Warnings...) {
				level := "ERROR"
				if e.Level == apierrors.LevelWarn {
					level = "WARN"
				}
				// e.Error() is "<Level>: [Field f, ][Value v]: detail"; drop the level and empty parts.
				msg := strings.TrimPrefix(strings.TrimPrefix(e.Error(), "Error: "), "Warning: ")
				msg = strings.TrimPrefix(strings.TrimPrefix(msg, ": "), "Value : ")
				findings = append(findings, fmt.Sprintf("%s [%s] %s: %s", level, validator, r.Name, msg))
			}
		}
	}

	// Format: operator-registry's ValidateBundleFormat, which operator-sdk runs first.
	report("BundleFormat", validateFormat(dir))

	// Loading from the bundle root (not manifests/) makes the loader also read
	// metadata/annotations.yaml, so Package/Channels/DefaultChannel are set and the channel-naming
	// and bundle-name checks see them.
	bundle, err := apimanifests.GetBundleFromDir(dir)
	if err != nil {
		report("Load", apierrors.ManifestResult{Name: dir, Errors: []apierrors.Error{
			apierrors.ErrInvalidBundle(err.Error(), dir)}})
	}
	if bundle != nil && bundle.CSV != nil {
		report("BundleObjects", validateObjects(bundle))
		// Like operator-sdk: every bundle object, plus the --optional-values map.
		objs := append(bundle.ObjectsToValidate(), optional)
		for _, v := range validators {
			report(v.name, v.Validate(objs...)...)
		}
	}

	for _, f := range findings {
		fmt.Println(f)
	}
	n := len(validators) + 3 // + BundleFormat, Load, BundleObjects
	if len(findings) > 0 {
		fmt.Printf("bundle %s: %d validators, %d finding(s)\n", dir, n, len(findings))
		os.Exit(1)
	}
	fmt.Printf("bundle %s: %d validators, no errors, no warnings\n", dir, n)
}

// parseArgs takes the bundle dir and --optional-values k=v[,k=v] (also --optional-values=...).
func parseArgs(args []string) (dir string, optional map[string]string, err error) {
	optional = map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--optional-values" && i+1 < len(args):
			i++
			a = "--optional-values=" + args[i]
			fallthrough
		case strings.HasPrefix(a, "--optional-values="):
			for _, kv := range strings.Split(strings.TrimPrefix(a, "--optional-values="), ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return "", nil, fmt.Errorf("bad --optional-values entry %q", kv)
				}
				optional[k] = v
			}
		case a == "--select-optional" && i+1 < len(args) && args[i+1] == "suite=operatorframework",
			a == "--select-optional=suite=operatorframework":
			// Accepted for drop-in use with operator-sdk's command line; that suite always runs.
			if !strings.Contains(a, "=") {
				i++
			}
		case strings.HasPrefix(a, "-"):
			return "", nil, fmt.Errorf("unknown flag %q", a)
		case dir == "":
			dir = a
		default:
			return "", nil, fmt.Errorf("unexpected argument %q", a)
		}
	}
	if dir == "" {
		return "", nil, fmt.Errorf("missing bundle directory")
	}
	return dir, optional, nil
}

// validateFormat checks the bundle layout and metadata/annotations.yaml the way operator-registry's
// ValidateBundleFormat does (required keys, mediatype matching the content, non-empty channels),
// and also what that function means to check but does not (manifests/ and metadata/ values) and
// that the default channel is one of the channels.
func validateFormat(dir string) apierrors.ManifestResult {
	res := apierrors.ManifestResult{Name: "metadata/annotations.yaml"}
	bad := func(format string, a ...any) {
		res.Add(apierrors.ErrInvalidBundle(fmt.Sprintf(format, a...), nil))
	}
	for _, d := range []string{"manifests", "metadata"} {
		if st, err := os.Stat(filepath.Join(dir, d)); err != nil || !st.IsDir() {
			bad("unable to locate the %s/ directory in %s", d, dir)
		}
	}
	if len(res.Errors) > 0 {
		return res
	}

	raw, err := os.ReadFile(filepath.Join(dir, "metadata", "annotations.yaml"))
	if err != nil {
		bad("could not read the annotations file: %v", err)
		return res
	}
	var file struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		bad("could not parse the annotations file: %v", err)
		return res
	}
	ann := file.Annotations
	if len(ann) == 0 {
		bad("the annotations file has no annotations")
		return res
	}
	for _, k := range []string{mediatypeLabel, manifestsLabel, metadataLabel, packageLabel, channelsLabel} {
		if _, ok := ann[k]; !ok {
			bad("missing annotation %q", k)
		}
	}
	// operator-registry's GetMediaType: a manifests/ dir holding a CSV is registry+v1.
	if mt := ann[mediatypeLabel]; mt != "registry+v1" {
		bad("annotation %q is %q, expected \"registry+v1\"", mediatypeLabel, mt)
	} else if !hasCSV(filepath.Join(dir, "manifests")) {
		bad("annotation %q is registry+v1 but manifests/ holds no ClusterServiceVersion", mediatypeLabel)
	}
	for k, want := range map[string]string{manifestsLabel: "manifests/", metadataLabel: "metadata/"} {
		if v, ok := ann[k]; ok && v != want {
			bad("annotation %q is %q, expected %q", k, v, want)
		}
	}
	if p, ok := ann[packageLabel]; ok {
		for _, msg := range validation.IsDNS1123Subdomain(p) {
			bad("annotation %q (%q): %s", packageLabel, p, msg)
		}
	}
	channels := map[string]bool{}
	for _, c := range strings.Split(ann[channelsLabel], ",") {
		if c = strings.TrimSpace(c); c == "" {
			bad("annotation %q must list non-empty channel names, got %q", channelsLabel, ann[channelsLabel])
			break
		}
		channels[c] = true
	}
	if def, ok := ann[channelDefaultLabel]; ok && (def == "" || !channels[def]) {
		bad("annotation %q (%q) must be one of the channels %q", channelDefaultLabel, def, ann[channelsLabel])
	}
	return res
}

func hasCSV(manifests string) bool {
	entries, _ := os.ReadDir(manifests)
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(manifests, e.Name()))
		if err != nil {
			continue
		}
		var obj struct{ Kind string }
		if yaml.Unmarshal(raw, &obj) == nil && obj.Kind == "ClusterServiceVersion" {
			return true
		}
	}
	return false
}

// validateObjects is operator-sdk's per-object part of ValidateBundleContent: every object other
// than the CSV and CRDs must be a kind registry+v1 supports and have valid metadata.
func validateObjects(bundle *apimanifests.Bundle) apierrors.ManifestResult {
	res := apierrors.ManifestResult{Name: bundle.Name}
	noName := func(string, bool) []string { return nil }
	for _, u := range bundle.Objects {
		gvk := u.GroupVersionKind()
		if gvk.Kind == "ClusterServiceVersion" || gvk.Kind == "CustomResourceDefinition" {
			continue
		}
		if !supportedKinds[gvk.Kind] {
			res.Add(apierrors.ErrInvalidBundle(fmt.Sprintf("%s %q is not a supported kind for a registry+v1 bundle", gvk, u.GetName()), u.GetName()))
			continue
		}
		errs := k8svalidation.ValidateObjectMetaAccessor(metav1.Object(u), false, noName, field.NewPath("metadata"))
		if len(errs) > 0 {
			msgs := make([]string, 0, len(errs))
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			sort.Strings(msgs)
			res.Add(apierrors.ErrFailedValidation(fmt.Sprintf("%s: %s", gvk.Kind, strings.Join(msgs, "; ")), u.GetName()))
		}
	}
	return res
}
