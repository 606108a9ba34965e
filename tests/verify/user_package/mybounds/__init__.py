"""A sample user package (not part of mlmix): two Dobrushin-type bounds stated with mlmix.theorem."""
