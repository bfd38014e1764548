// Package packaging builds the sosappliance .deb and .rpm packages: it
// cross-compiles the binary, derives the package version from git, generates
// the shell completions, man page and changelogs from the sources, and hands
// the result to nfpm. cmd/mkpkg is its command-line front end (`make packages`).
package packaging
