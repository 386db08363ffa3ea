package testkit

import "path/filepath"

// Bin returns the path of a PostgreSQL client program installed with the
// server, such as "pgbench" or "psql".
func (s *PostgresServer) Bin(name string) string {
	return filepath.Join(s.binDir, name)
}
