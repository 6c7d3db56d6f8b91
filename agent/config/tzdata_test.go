package config

// Embedded zone data: window and time zone tests must not depend on the
// machine's tzdata package.
import _ "time/tzdata"
