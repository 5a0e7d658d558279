module podns.local/resolve

go 1.24
