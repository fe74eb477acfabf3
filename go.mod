module github.com/ratewarden/ratewarden

go 1.26
