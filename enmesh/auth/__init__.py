"""enmesh-auth: the authentication service routers delegate SASL to (qdrouterd's
`authServicePlugin` protocol), checking passwords against Keycloak."""
